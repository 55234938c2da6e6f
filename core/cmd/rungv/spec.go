package main

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/spec"
)

// sandboxFlags are the flags of rungv run that describe the sandbox, named
// as docker run names them. toSpec reads them, once, into the spec.Sandbox
// that everything after reads; rungv run --spec takes a spec whole instead
// and refuses them.
type sandboxFlags struct {
	entrypoint   string
	env          []string
	envFiles     []string
	workdir      string
	user         string
	hostname     string
	keepAlive    bool
	restore      string
	platform     string
	spin         bool
	network      string
	publish      []string
	allowNet     []string
	hostLoopback bool
	netRaw       bool
	nftables     bool
	packetWrite  bool
	allowSUID    bool
	mounts       []string
	memory       string
	cpus         float64
	cpusetCPUs   string
	pidsLimit    int
	timeout      time.Duration
}

// register adds the flags to fl.
func (f *sandboxFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.entrypoint, "entrypoint", "", "overwrite the image's entrypoint")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set an environment variable (KEY=VALUE, or KEY to copy the host's)")
	fl.StringArrayVar(&f.envFiles, "env-file", nil, "read environment variables from a file")
	fl.StringVarP(&f.workdir, "workdir", "w", "", "working directory inside the sandbox")
	fl.StringVarP(&f.user, "user", "u", "", "user: name|uid[:group|gid]")
	fl.StringVar(&f.hostname, "hostname", "", "the sandbox's hostname")
	fl.BoolVar(&f.keepAlive, "keep-alive", false, "run an idle init instead of the command; use the control endpoint to exec")
	fl.StringVar(&f.restore, "restore", "", "continue the sandbox saved in the snapshot `FILE` (written by rungv checkpoint) instead of running a command; give the IMAGE, volumes (clones of the saved images) and network flags it was saved with")
	fl.StringVar(&f.platform, "platform", "auto", "syscall interception: systrap, kvm, ptrace or auto (systrap)")
	fl.BoolVar(&f.spin, "spin", true, "let systrap's threads spin while the guest and the Sentry wait for each other: a lone sandbox's system calls run 2-5x faster; turn it off when more sandboxes are busy than there are CPUs, where spinning takes the CPU the others need ($"+spinEnv+"=0 or 1 sets it when this flag is not given)")
	fl.StringVar(&f.network, "network", "none", "network: none (loopback only) or nat (eth0 10.0.2.15 behind a user-space NAT; DNS at 10.0.2.2)")
	fl.StringArrayVarP(&f.publish, "publish", "p", nil, "publish a guest port: [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp] (IP defaults to 127.0.0.1; without HOSTPORT, or with 0, the host picks a free port and rungv says which) or unix:HOSTPATH:GUESTPORT")
	fl.StringArrayVar(&f.allowNet, "allow-net", nil, "with --network nat, allow only these destinations: CIDR[:PORT], as the guest names them (repeatable; default: all). Link-local addresses (cloud metadata) and the host's own addresses stay refused unless a rule names them: a prefix inside 169.254.0.0/16 or fe80::/10, or exactly the host's address (/32, /128); 0.0.0.0/0 or the host's subnet does not")
	fl.BoolVar(&f.hostLoopback, "host-loopback", false, "with --network nat, let the gateway 10.0.2.2 reach the host's 127.0.0.1")
	fl.BoolVar(&f.netRaw, "net-raw", false, "allow raw and packet sockets to guest root (an image labelled dev.gfire.gvx.needs=net-raw gets them unless --net-raw=false)")
	addNFTablesFlag(fl, &f.nftables)
	fl.BoolVar(&f.packetWrite, "allow-packet-socket-write", false, "let packet sockets send, not only capture (needs --net-raw)")
	fl.BoolVar(&f.allowSUID, "allow-suid", false, "honour setuid/setgid bits in the sandbox")
	addMountFlags(fl, &f.mounts)
	fl.StringVarP(&f.memory, "memory", "m", "", "memory limit of the whole sandbox, e.g. 512m, 2g (the guest's OOM killer acts inside)")
	fl.Float64Var(&f.cpus, "cpus", 0, "number of CPUs the sandbox sees (default: as many as --cpuset-cpus names, else the host's)")
	fl.StringVar(&f.cpusetCPUs, "cpuset-cpus", "", "host CPUs the sandbox runs on, e.g. 0-3,6 (pinning one sandbox to one CPU shortens its system calls and execs)")
	fl.IntVar(&f.pidsLimit, "pids-limit", spec.DefaultPidsLimit, "maximum number of tasks (threads included) in the sandbox; fork fails with EAGAIN beyond it (0 or -1: no limit)")
	fl.DurationVar(&f.timeout, "timeout", 0, "stop the sandbox after this long (wall clock)")
}

// toSpec reads the flags in fl, which f registered, and the arguments
// IMAGE [COMMAND [ARG...]] into a spec. It checks what only the command
// line can get wrong (a flag's syntax, the CLI's own meanings), naming the
// flag; the returned flagNames restate the spec's later errors in terms of
// the flags.
func (f *sandboxFlags) toSpec(fl *pflag.FlagSet, args []string) (spec.Sandbox, flagNames, error) {
	given := flagNames{}
	sp := spec.Sandbox{
		Image:                  args[0],
		Workdir:                f.workdir,
		User:                   f.user,
		Hostname:               f.hostname,
		KeepAlive:              f.keepAlive,
		Restore:                f.restore,
		AllowNet:               f.allowNet,
		HostLoopback:           f.hostLoopback,
		NetRaw:                 f.netRaw,
		NFTables:               f.nftables,
		AllowPacketSocketWrite: f.packetWrite,
		AllowSUID:              f.allowSUID,
		CPUs:                   f.cpus,
		Timeout:                spec.Seconds(f.timeout),
	}
	if len(args) > 1 {
		sp.Cmd = args[1:]
	}
	if fl.Changed("entrypoint") {
		// docker run --entrypoint takes one word; "" means none.
		ep := []string{}
		if f.entrypoint != "" {
			ep = append(ep, f.entrypoint)
		}
		sp.Entrypoint = &ep
	}
	if fl.Changed("platform") {
		sp.Platform = spec.Platform(f.platform)
	}
	if fl.Changed("spin") {
		sp.Spin = &f.spin
	}
	var err error
	if sp.Env, err = f.environment(); err != nil {
		return sp, given, err
	}
	if fl.Changed("network") {
		if sp.Network, err = networkMode(f.network); err != nil {
			return sp, given, err
		}
	}
	for i, s := range f.publish {
		p, err := parsePublish(s)
		if err != nil {
			return sp, given, err
		}
		sp.Ports = append(sp.Ports, p)
		given[fmt.Sprintf("ports[%d]", i)] = s
	}
	for i, s := range f.mounts {
		m, err := parseMount(s)
		if err != nil {
			return sp, given, fmt.Errorf("--mount %s: %w", s, err)
		}
		sp.Mounts = append(sp.Mounts, m)
		given[fmt.Sprintf("mounts[%d]", i)] = s
	}
	sp.Memory, err = parseBytes(f.memory)
	switch {
	case errors.Is(err, errSizeTooLarge):
		sp.Memory = math.MaxUint64 // the limits check names the bound
	case err != nil:
		return sp, given, fmt.Errorf("--memory: %w", err)
	}
	given["memory"] = f.memory
	if sp.CPUSet, err = parseCPUList(f.cpusetCPUs); err != nil {
		return sp, given, fmt.Errorf("--cpuset-cpus: %w", err)
	}
	given["cpuset"] = f.cpusetCPUs
	if fl.Changed("pids-limit") {
		// docker run passes 0 for "no limit" as well as -1; in a spec 0
		// is the default.
		switch n := f.pidsLimit; {
		case n == 0 || n == -1:
			sp.PidsLimit = -1
		case n < -1:
			return sp, given, fmt.Errorf("--pids-limit %d is negative; give a count of tasks, or -1 for no limit", n)
		default:
			sp.PidsLimit = n
		}
	}
	return sp, given, nil
}

// environment reads -e and --env-file into KEY=VALUE entries: the files'
// then the flags', later ones overriding earlier ones by name.
func (f *sandboxFlags) environment() ([]string, error) {
	var env []string
	for _, path := range f.envFiles {
		entries, err := readEnvFile(path)
		if err != nil {
			return nil, err
		}
		env = host.MergeEnv(env, entries)
	}
	for _, e := range f.env {
		kv, ok, err := expandEnvEntry(e)
		if err != nil {
			return nil, fmt.Errorf("--env %q: %w", e, err)
		}
		if ok {
			env = host.MergeEnv(env, []string{kv})
		}
	}
	return env, nil
}

// networkMode reads --network. The modes docker users reach for get an
// answer; the spec's own check refuses the rest.
func networkMode(s string) (spec.NetworkMode, error) {
	switch s {
	case "host":
		return "", errors.New("--network host: a sandbox never shares the host's network; use --network nat (add --host-loopback to reach the host's 127.0.0.1 as 10.0.2.2)")
	case "bridge", "default", "slirp4netns", "pasta":
		return "", fmt.Errorf("--network %s: use --network nat, gvx's user-space NAT", s)
	}
	return spec.NetworkMode(s), nil
}
