package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/internal/hostfile"
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
	fl.BoolVar(&f.netRaw, "net-raw", false, "allow raw and packet sockets to guest root")
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

// specFlags names the flag (or argument) of rungv run that sets each field
// of spec.Sandbox, by the field's JSON name: an error about a field names
// the flag on the command line. TestSpecFlagsCoverTheSpec holds it to the
// spec's fields.
var specFlags = map[string]string{
	"image":                     "IMAGE",
	"entrypoint":                "--entrypoint",
	"cmd":                       "COMMAND",
	"env":                       "--env",
	"workdir":                   "--workdir",
	"user":                      "--user",
	"hostname":                  "--hostname",
	"keep_alive":                "--keep-alive",
	"restore":                   "--restore",
	"platform":                  "--platform",
	"spin":                      "--spin",
	"network":                   "--network",
	"ports":                     "--publish",
	"allow_net":                 "--allow-net",
	"host_loopback":             "--host-loopback",
	"net_raw":                   "--net-raw",
	"nftables":                  "--nftables",
	"allow_packet_socket_write": "--allow-packet-socket-write",
	"allow_suid":                "--allow-suid",
	"mounts":                    "--mount",
	"memory":                    "--memory",
	"cpus":                      "--cpus",
	"cpuset":                    "--cpuset-cpus",
	"pids_limit":                "--pids-limit",
	"timeout":                   "--timeout",
}

// flagSays rewords, for the command line, spec.Validate's problems that
// name other fields of the spec: there they are flags and arguments.
var flagSays = map[string]string{
	"keep_alive":                "runs an idle init: give no COMMAND and no --entrypoint",
	"restore":                   "continues the snapshot's own init: give no COMMAND, --entrypoint, -t or --keep-alive",
	"allow_net":                 "restricts the NAT: add --network nat",
	"host_loopback":             "needs the NAT: add --network nat",
	"allow_packet_socket_write": "lets packet sockets send, and packet sockets need --net-raw: add it",
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

// refuseSandboxFlags fails, for rungv run --spec, if any flag of fl (the
// sandbox's) or an argument was given: the spec describes the sandbox
// whole.
func refuseSandboxFlags(fl *pflag.FlagSet, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("--spec gives the image and the command (its image, entrypoint and cmd): drop %q from the command line", args)
	}
	var err error
	fl.VisitAll(func(f *pflag.Flag) {
		if err != nil || !f.Changed {
			return
		}
		field := "env" // --env-file
		for name, flag := range specFlags {
			if flag == "--"+f.Name {
				field = name
			}
		}
		err = fmt.Errorf("--%s describes the sandbox, which --spec gives whole: set %s in the spec instead, or drop --spec", f.Name, field)
	})
	return err
}

// maxSpecSize bounds a --spec's JSON. A spec is a few KiB; rungv reads it
// whole before anything checks it.
const maxSpecSize = 1 << 20

// readSpec reads the spec that --spec names: fd:N, an inherited descriptor
// (a pipe, or a file such as a sealed memfd, read from where it stands to
// its end), or the path of a regular file.
func readSpec(from string) (spec.Sandbox, error) {
	const want = "give fd:N (an inherited descriptor) or the path of a file that holds the spec's JSON"
	var f *os.File
	if fd, ok := strings.CutPrefix(from, "fd:"); ok {
		n, err := strconv.Atoi(fd)
		if err != nil || n < 3 {
			return spec.Sandbox{}, fmt.Errorf("--spec %.64s: want fd:N with N >= 3; %s", from, want)
		}
		var st unix.Stat_t
		if err := unix.Fstat(n, &st); err != nil {
			return spec.Sandbox{}, fmt.Errorf("--spec %s: descriptor %d: %w; pass it open, or %s", from, n, err, want)
		}
		if k := st.Mode & unix.S_IFMT; k != unix.S_IFIFO && k != unix.S_IFREG {
			return spec.Sandbox{}, fmt.Errorf("--spec %s: descriptor %d is neither a pipe nor a file; %s", from, n, want)
		}
		f = os.NewFile(uintptr(n), "spec")
	} else {
		if from == "" {
			return spec.Sandbox{}, fmt.Errorf("--spec \"\": %s", want)
		}
		var err error
		if f, err = hostfile.Open(from, os.O_RDONLY, hostfile.Regular); err != nil {
			return spec.Sandbox{}, fmt.Errorf("--spec %.64s: %w; %s", from, err, want)
		}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSpecSize+1))
	switch {
	case err != nil:
		return spec.Sandbox{}, fmt.Errorf("--spec %.64s: %w; %s", from, err, want)
	case len(b) > maxSpecSize:
		return spec.Sandbox{}, fmt.Errorf("--spec %.64s: more than %d KiB, and a sandbox spec is a few KiB: pass the spec's JSON alone", from, maxSpecSize>>10)
	}
	sp, err := decodeSpec(b)
	if err != nil {
		return sp, fmt.Errorf("--spec %.64s: %w", from, err)
	}
	return sp, nil
}

// decodeSpec decodes a spec's JSON, naming the field at fault as the spec
// does.
func decodeSpec(b []byte) (spec.Sandbox, error) {
	var sp spec.Sandbox
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(&sp)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		return sp, errors.New("holds more than the spec's JSON object; give that object alone")
	}
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case err == nil:
		return sp, nil
	case errors.Is(err, io.EOF):
		return sp, errors.New(`is empty; give the spec's JSON, e.g. {"image": "busybox", "keep_alive": true}`)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return sp, errors.New(`is not JSON: it ends inside the spec's object; give the whole object, e.g. {"image": "busybox", "keep_alive": true}`)
	case errors.As(err, &syntaxErr):
		return sp, fmt.Errorf("is not JSON (at byte %d: %v); give the spec's JSON, e.g. {\"image\": \"busybox\", \"keep_alive\": true}", syntaxErr.Offset, err)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return sp, &spec.FieldError{Field: typeErr.Field, Problem: fmt.Sprintf("is a JSON %s; give %s", typeErr.Value, jsonWant(typeErr.Type))}
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return sp, &spec.FieldError{Field: strings.Trim(name, `"`), Problem: "is not a field of a sandbox spec; check its name against core/spec's JSON names"}
	}
	return sp, fmt.Errorf("%w; give the spec's JSON as core/spec describes it", err)
}

// jsonWant says what JSON a Go type takes.
func jsonWant(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("a whole number that fits a %s", t.Kind())
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "an object"
}

// fieldError is a problem with one field of a spec found after
// spec.Validate, by what this host gives or lets a sandbox do. It keeps
// the field's value apart from the problem so that the command line can
// show the value as the user typed it (flagNames); its Error names the
// field as the spec does.
type fieldError struct {
	field   string // named as spec.FieldError names it: "cpus", "ports[1].host_path"
	value   string // the field's value, as the spec holds it; "" when problem names it
	problem string // what is wrong, after the value, and what to give instead
	cause   error  // the error found, if any
}

// Error implements error.
func (e *fieldError) Error() string {
	return (&spec.FieldError{Field: e.field, Problem: join(e.value, e.problem)}).Error()
}

// Unwrap returns the error the problem was found as.
func (e *fieldError) Unwrap() error { return e.cause }

func join(value, problem string) string {
	if value == "" {
		return problem
	}
	return value + " " + problem
}

// fieldNames names the fields of a spec in errors and messages.
type fieldNames interface {
	// name names a field, for a message such as "NAME 30s reached".
	name(field string) string
	// explain restates err's problems with the spec's fields.
	explain(err error) error
}

// specNames names fields as the spec does: for rungv run --spec.
type specNames struct{}

func (specNames) name(field string) string { return "the spec's " + field }
func (specNames) explain(err error) error  { return err }

// flagNames names fields by the flags that set them (specFlags), with the
// values as typed where the spec holds them otherwise: "memory" -> "2t",
// "ports[1]" -> "8080:80". For rungv run without --spec.
type flagNames map[string]string

func (n flagNames) name(field string) string { return specFlags[field] }

// explain restates the spec's problems in err (*spec.FieldError,
// *fieldError, or a join of them) as problems with flags. Other errors
// are left as they are.
func (n flagNames) explain(err error) error {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var errs []error
		for _, e := range joined.Unwrap() {
			errs = append(errs, n.explain(e))
		}
		return errors.Join(errs...)
	}
	switch e := err.(type) {
	case *spec.FieldError:
		problem := e.Problem
		if says, ok := flagSays[e.Field]; ok {
			problem = says
		}
		return errors.New(n.flag(e.Field) + " " + problem)
	case *fieldError:
		if given, ok := n[e.field]; ok {
			// The whole field, as typed: --memory 2t.
			return errors.New(n.flag(e.field) + " " + join(given, e.problem))
		}
		elem, sub, _ := strings.Cut(e.field, ".")
		if given, ok := n[elem]; ok && sub != "" {
			// The flag gave the element the field is part of:
			// --publish unix:/long/path:80: /long/path is ...
			return fmt.Errorf("%s %s: %s", n.flag(e.field), given, join(e.value, e.problem))
		}
		if e.value == "" {
			return fmt.Errorf("%s: %s", n.flag(e.field), e.problem)
		}
		return fmt.Errorf("%s %s %s", n.flag(e.field), e.value, e.problem)
	}
	return err
}

// flag names the flag that sets field ("ports[1].host_ip" -> "--publish").
func (n flagNames) flag(field string) string {
	name, _, _ := strings.Cut(field, "[")
	name, _, _ = strings.Cut(name, ".")
	if flag, ok := specFlags[name]; ok {
		return flag
	}
	return field
}

// checkWorkdir checks the spec's working directory against what Linux
// takes of a path; whether it can be a directory only the guest knows.
func checkWorkdir(dir string) error {
	value := fmt.Sprintf("%.64q", dir)
	switch {
	case dir == "":
		return nil
	case !path.IsAbs(dir):
		// As docker run words it.
		return &fieldError{"workdir", value, "is invalid, it needs to be an absolute path; give one such as /app", nil}
	case len(dir) >= unix.PathMax:
		return &fieldError{"workdir", value, fmt.Sprintf("is %d bytes, more than the %d Linux takes (PATH_MAX); give a shorter one", len(dir), unix.PathMax-1), nil}
	}
	for _, name := range strings.Split(dir, "/") {
		if len(name) > unix.NAME_MAX {
			return &fieldError{"workdir", value, fmt.Sprintf("has a name of %d bytes, more than the %d Linux takes (NAME_MAX); give a shorter one", len(name), unix.NAME_MAX), nil}
		}
	}
	return nil
}
