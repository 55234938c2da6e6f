// Package gvx is the Go SDK of gvx: isolated, Docker-capable sandboxes for
// training and evaluating coding agents.
//
// A sandbox is a rungv child process running gVisor's Sentry; it never
// runs inside the caller's process. New starts the child and connects to
// it over an inherited socket with gvx's control protocol (core/control).
// The child dies with the caller: it gets SIGKILL if the caller's process
// dies, and stops when the control connection goes away.
//
//	sb, err := gvx.New(ctx, gvx.Config{OCIImage: "oci:./busybox:latest", KeepAlive: true})
//	if err != nil { … }
//	defer sb.Close()
//	res, err := sb.Exec(ctx, []string{"sh", "-c", "echo hi"}, nil)
//	fmt.Printf("%d %s", res.ExitCode, res.Stdout)
package gvx

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/spec"
)

// Platform selects how the Sentry intercepts guest system calls.
type Platform string

// Platforms.
const (
	PlatformAuto    Platform = ""        // systrap
	PlatformSystrap Platform = "systrap" // seccomp traps in ptraced stubs; no privilege needed
	PlatformKVM     Platform = "kvm"     // hardware virtualisation; needs access to /dev/kvm
	PlatformPtrace  Platform = "ptrace"  // PTRACE_SYSEMU; slow
)

// SpinMode says whether systrap's threads spin, instead of sleeping, while
// the guest and the Sentry wait for each other (rungv --spin).
type SpinMode int

// Spin modes.
const (
	// SpinAuto spins unless the host's CPUs are oversubscribed as the
	// sandbox starts (twice as many threads running or waiting for a CPU,
	// besides the caller, as there are CPUs) and while no more than twice as many sandboxes
	// as there are CPUs spin on this host, the new one included, whichever
	// processes started them; otherwise it sleeps. Spinning makes a lone
	// busy sandbox's system calls several times faster; with more busy
	// sandboxes than CPUs the spinners take the CPU that the others need,
	// for the whole life of the sandbox (figures in benchmarks/README).
	// Twice, not once: a sandbox that waits in a warm pool is alive but not
	// busy, and an environment with a pool of two on 2 CPUs should still
	// spin. $GVX_SPIN, if set, decides for the sandboxes SpinAuto would let
	// spin.
	SpinAuto SpinMode = iota
	SpinOn
	SpinOff
)

// NetworkMode selects the sandbox's network.
type NetworkMode string

// Network modes.
const (
	NetModeNone NetworkMode = "none" // loopback only
	// NetModeNAT gives the sandbox eth0, 10.0.2.15/24, behind a
	// user-space NAT in rungv: the guest's TCP and UDP flows are dialed
	// as ordinary host sockets, DNS to the gateway 10.0.2.2 is relayed to
	// the host's resolvers, and /etc/resolv.conf is set to the gateway
	// unless the image names a real nameserver. No root, no host change.
	NetModeNAT NetworkMode = "nat"
)

// PortMapping publishes a port of the sandbox on the host. Connections
// (or UDP datagrams) to the host side reach the guest's 127.0.0.1:
// GuestPort, so a guest service listening on 0.0.0.0 or 127.0.0.1 gets
// them, in either network mode; in NetModeNAT a TCP connection that
// loopback refuses is tried on eth0's 10.0.2.15 next.
type PortMapping struct {
	// HostPath, if not empty, publishes on a unix socket at this host
	// path (the seed workflow: DOCKER_HOST=unix://HostPath); the guest
	// side is TCP. rungv creates it with mode 0600, refuses a path that
	// exists, and the socket is removed when rungv ends, even by SIGKILL.
	HostPath string
	// HostIP is the host address to listen on when HostPath is empty;
	// empty means 127.0.0.1.
	HostIP string
	// HostPort is the host port when HostPath is empty; 0 lets the host
	// pick a free one, which Sandbox.Info().Ports reports (what a fleet of
	// sandboxes publishing the same guest port wants).
	HostPort uint16
	// GuestPort is the port in the sandbox.
	GuestPort uint16
	// Protocol is "tcp" (or empty) or "udp".
	Protocol string
}

// MountKind is the kind of a Mount.
type MountKind string

// Mount kinds.
const (
	// MountVolume mounts a single-file ext4 volume (ImagePath) that the
	// Sentry reads and writes itself.
	MountVolume MountKind = "volume"
)

// Mount attaches storage to the sandbox.
//
// A MountVolume mount attaches the ext4 volume in the host file ImagePath
// (an image or a clone, see `rungv volume`) at GuestPath. A missing
// ImagePath is created (16 GiB, sparse) unless ReadOnly. The sandbox
// writes the volume back and closes it cleanly when it stops; if its
// process is killed instead, the journal replays at the next mount.
type Mount struct {
	Kind      MountKind
	ImagePath string // host file of a volume
	GuestPath string // absolute path inside the sandbox
	ReadOnly  bool
}

// Resources limit the sandbox as a whole.
type Resources struct {
	// MemoryBytes is the sandbox's total memory; the guest's OOM killer
	// acts inside it. 0: no limit.
	MemoryBytes uint64
	// CPUMillis is the CPU count the guest sees, in thousandths (1500 is
	// 2 CPUs, rounded up). 0: as many as CPUSet names, else the host's.
	CPUMillis int
	// CPUSet lists the host CPUs the sandbox runs on (docker run
	// --cpuset-cpus). Pinning each sandbox of a fleet to its own CPU
	// shortens guest system calls and execs and keeps sandboxes out of
	// each other's caches. Empty: every CPU the caller may use.
	CPUSet []int
	// PidsLimit caps the tasks (threads included) in the sandbox; fork
	// fails with EAGAIN beyond it. 0: sentry.DefaultPidsLimit (2048);
	// -1: no limit.
	PidsLimit int
}

// Config describes a sandbox.
type Config struct {
	// OCIImage is the image reference (registry, oci:DIR[:TAG],
	// docker-archive:FILE); it is pulled into the cache if missing.
	OCIImage string
	// Entrypoint replaces the image's entrypoint when EntrypointSet is
	// true (an empty Entrypoint then means none).
	Entrypoint    []string
	EntrypointSet bool
	// Cmd replaces the image's Cmd.
	Cmd []string
	// Envv adds or overrides environment variables ("KEY=VALUE").
	Envv       []string
	WorkingDir string
	User       string // name|uid[:group|gid]
	Hostname   string

	// KeepAlive runs an idle init instead of the image's command, for
	// sandboxes driven through Exec. Run then waits until Close.
	KeepAlive bool

	// Restore continues the sandbox saved in this snapshot file
	// (Sandbox.Checkpoint) instead of starting a command: its processes
	// go on where they were. OCIImage, Mounts (clones of the volumes'
	// saved images) and the network fields must be as when it was saved;
	// Cmd, Entrypoint and KeepAlive must be unset.
	Restore string

	Platform Platform

	// Spin: see SpinMode. The zero value is SpinAuto.
	Spin SpinMode

	// NetworkMode is NetModeNone (empty) or NetModeNAT.
	NetworkMode NetworkMode
	// Ports are published on the host (either mode).
	Ports []PortMapping
	// AllowNet, in NetModeNAT, lists the only destinations the guest may
	// reach, as CIDR[:PORT] ("10.0.0.0/8", "192.0.2.1:443",
	// "[2001:db8::/32]:443"), named as the guest names them: the gateway
	// 10.0.2.2 stands for the host's loopback. Empty: everything.
	// Link-local addresses (cloud metadata) and the host's own addresses
	// stay refused either way unless a rule names them: a prefix inside
	// 169.254.0.0/16 or fe80::/10, or exactly the host's address; a
	// covering prefix (0.0.0.0/0, the host's subnet) does not. Refused
	// connections get a RST, refused UDP an ICMP port unreachable.
	AllowNet []string
	// HostLoopback, in NetModeNAT, lets the gateway 10.0.2.2 reach the
	// host's 127.0.0.1 (port 53 stays the DNS relay).
	HostLoopback bool
	// NetRaw lets guest root open raw and packet sockets.
	NetRaw bool
	// NFTables gives the sandbox gVisor's nftables (iptables-nft).
	// dockerd with its defaults (bridge network, iptables on) needs it
	// and NetRaw; the Docker-in-gvx image refuses to start without them.
	NFTables bool
	// AllowPacketSocketWrite lets packet sockets send, not only capture;
	// it needs NetRaw.
	AllowPacketSocketWrite bool

	AllowSUID bool
	Mounts    []Mount
	Resources Resources

	// Timeout stops the sandbox after this long (wall clock). 0: none.
	Timeout time.Duration

	// Stdin, Stdout and Stderr are the init command's streams (rungv's).
	// Nil: no input, output discarded (the last 64 KiB of stderr is kept
	// for error messages either way).
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	// Rungv is the rungv binary. Empty: $GVX_RUNGV, then "rungv" next to
	// the running executable, then $PATH.
	Rungv string
	// Cache is the image cache directory. Empty: $GVX_CACHE or
	// ~/.cache/gvx.
	Cache string
	// Insecure allows plain-HTTP registries when pulling OCIImage.
	Insecure bool

	// extraArgs are added to `rungv run`'s flags (tests): runner flags
	// only, as the spec describes the sandbox.
	extraArgs []string
}

// spec returns the spec of the sandbox c describes, field for field, and
// checks it (spec.Sandbox.Validate, whose errors name the spec's fields).
// SpinAuto is an unset Spin: rungv then spins unless $GVX_SPIN says
// otherwise; New turns it into SpinOff when the host has no spin slot.
func (c *Config) spec() (spec.Sandbox, error) {
	sp := spec.Sandbox{
		Image:                  c.OCIImage,
		Cmd:                    c.Cmd,
		Env:                    c.Envv,
		Workdir:                c.WorkingDir,
		User:                   c.User,
		Hostname:               c.Hostname,
		KeepAlive:              c.KeepAlive,
		Restore:                c.Restore,
		Platform:               spec.Platform(c.Platform),
		Network:                spec.NetworkMode(c.NetworkMode),
		AllowNet:               c.AllowNet,
		HostLoopback:           c.HostLoopback,
		NetRaw:                 c.NetRaw,
		NFTables:               c.NFTables,
		AllowPacketSocketWrite: c.AllowPacketSocketWrite,
		AllowSUID:              c.AllowSUID,
		Memory:                 c.Resources.MemoryBytes,
		CPUs:                   float64(c.Resources.CPUMillis) / 1000,
		CPUSet:                 c.Resources.CPUSet,
		PidsLimit:              c.Resources.PidsLimit,
		Timeout:                spec.Seconds(c.Timeout),
	}
	if c.EntrypointSet {
		ep := append([]string{}, c.Entrypoint...)
		sp.Entrypoint = &ep
	}
	switch c.Spin {
	case SpinAuto:
	case SpinOn, SpinOff:
		on := c.Spin == SpinOn
		sp.Spin = &on
	default:
		return sp, fmt.Errorf("gvx: unknown Spin %d; use SpinAuto, SpinOn or SpinOff", c.Spin)
	}
	for _, p := range c.Ports {
		sp.Ports = append(sp.Ports, spec.Port{HostPath: p.HostPath, HostIP: p.HostIP, HostPort: p.HostPort, GuestPort: p.GuestPort, Protocol: p.Protocol})
	}
	for _, m := range c.Mounts {
		sp.Mounts = append(sp.Mounts, spec.Mount{Type: spec.MountType(m.Kind), Source: m.ImagePath, Target: m.GuestPath, ReadOnly: m.ReadOnly})
	}
	if err := sp.Validate(); err != nil {
		return sp, fmt.Errorf("gvx: the Config is not a valid sandbox: %w", err)
	}
	return sp, nil
}

// runArgs are rungv's arguments for a sandbox whose control socket is
// inherited as descriptor controlFD, the pipe for its exit status as the
// next one and its spec (specFile) as the one after.
func (c *Config) runArgs(controlFD int) []string {
	var a []string
	if c.Cache != "" {
		a = append(a, "--cache", c.Cache)
	}
	// The exit status descriptor: see Sandbox.exitCode.
	a = append(a, "run", "--quiet", "--control", "fd:"+strconv.Itoa(controlFD),
		"--exit-status-fd", strconv.Itoa(controlFD+1), "--spec", "fd:"+strconv.Itoa(controlFD+2))
	if c.Stdin != nil {
		a = append(a, "--interactive")
	}
	return append(a, c.extraArgs...)
}

// specFile returns a sealed memfd that holds sp's JSON, for rungv's --spec
// fd:N. A memfd, not a pipe: the spec is there whole before rungv starts,
// whatever its size, with nothing left to write it (a pipe holds 64 KiB
// before its writer blocks) and no writer to fail if rungv dies early;
// the seals keep it as written while rungv reads it.
func specFile(sp *spec.Sandbox) (*os.File, error) {
	b, err := json.Marshal(sp)
	if err != nil {
		return nil, fmt.Errorf("gvx: encoding the sandbox spec: %w", err)
	}
	fd, err := unix.MemfdCreate("gvx-spec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, withHostLimitHint("creating the memfd for the sandbox spec", err)
	}
	f := os.NewFile(uintptr(fd), "gvx-spec")
	if _, err = f.Write(b); err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	}
	if err == nil {
		// rungv reads from where the shared offset stands.
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("gvx: writing the sandbox spec to a memfd: %w", err)
	}
	return f, nil
}

// rungvPath finds the rungv binary.
func (c *Config) rungvPath() (string, error) {
	if c.Rungv != "" {
		return c.Rungv, nil
	}
	if p := os.Getenv("GVX_RUNGV"); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "rungv")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("rungv")
	if err != nil {
		return "", errors.New("gvx: rungv not found: set Config.Rungv or $GVX_RUNGV, or put rungv on PATH (make builds build/rungv)")
	}
	return p, nil
}
