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
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"
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

// flag renders m as rungv's -p value.
func (m PortMapping) flag() (string, error) {
	if m.GuestPort == 0 {
		return "", fmt.Errorf("gvx: PortMapping %+v: set GuestPort", m)
	}
	if m.Protocol != "" && m.Protocol != "tcp" && m.Protocol != "udp" {
		return "", fmt.Errorf("gvx: PortMapping %+v: Protocol is \"tcp\" or \"udp\"", m)
	}
	if m.HostPath != "" {
		if m.Protocol == "udp" || m.HostIP != "" || m.HostPort != 0 {
			return "", fmt.Errorf("gvx: PortMapping %+v: a unix socket (HostPath) carries TCP and takes no HostIP or HostPort", m)
		}
		return "unix:" + m.HostPath + ":" + strconv.Itoa(int(m.GuestPort)), nil
	}
	host := m.HostIP
	if host == "" {
		host = "127.0.0.1"
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	s := host + ":" + strconv.Itoa(int(m.HostPort)) + ":" + strconv.Itoa(int(m.GuestPort))
	if m.Protocol == "udp" {
		s += "/udp"
	}
	return s, nil
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

// flag renders m as a `rungv run --mount` value.
func (m Mount) flag() (string, error) {
	switch m.Kind {
	case MountVolume, "":
	default:
		return "", fmt.Errorf("gvx: unknown Mount.Kind %q; use MountVolume", m.Kind)
	}
	if m.ImagePath == "" {
		return "", fmt.Errorf("gvx: the volume for %q has no ImagePath; name its host file", m.GuestPath)
	}
	if !path.IsAbs(m.GuestPath) {
		return "", fmt.Errorf("gvx: Mount.GuestPath %q must be an absolute path in the sandbox", m.GuestPath)
	}
	image, err := filepath.Abs(m.ImagePath)
	if err != nil {
		return "", fmt.Errorf("gvx: Mount.ImagePath %q: %w", m.ImagePath, err)
	}
	if strings.Contains(image, ",") || strings.Contains(m.GuestPath, ",") {
		return "", fmt.Errorf("gvx: mount paths may not contain commas: %q, %q", image, m.GuestPath)
	}
	spec := "type=volume,src=" + image + ",dst=" + m.GuestPath
	if m.ReadOnly {
		spec += ",readonly"
	}
	return spec, nil
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

	// extraArgs are added to `rungv run`'s flags (tests).
	extraArgs []string
}

// args renders the config as `rungv run` arguments.
func (c *Config) args(controlFD int) ([]string, error) {
	if c.OCIImage == "" {
		return nil, errors.New("gvx: Config.OCIImage is empty; name an image (e.g. oci:./busybox:latest)")
	}
	var a []string
	if c.Cache != "" {
		a = append(a, "--cache", c.Cache)
	}
	// The descriptor after the control socket receives the command's exit
	// status (see Sandbox.exitCode).
	a = append(a, "run", "--quiet", "--control", "fd:"+strconv.Itoa(controlFD), "--exit-status-fd", strconv.Itoa(controlFD+1))
	if c.EntrypointSet {
		switch len(c.Entrypoint) {
		case 0:
			a = append(a, "--entrypoint", "")
		default:
			a = append(a, "--entrypoint", c.Entrypoint[0])
		}
	}
	for _, e := range c.Envv {
		a = append(a, "--env", e)
	}
	if c.WorkingDir != "" {
		a = append(a, "--workdir", c.WorkingDir)
	}
	if c.User != "" {
		a = append(a, "--user", c.User)
	}
	if c.Hostname != "" {
		a = append(a, "--hostname", c.Hostname)
	}
	if c.KeepAlive {
		a = append(a, "--keep-alive")
	}
	if c.Restore != "" {
		if c.KeepAlive || len(c.Cmd) > 0 || c.EntrypointSet {
			return nil, errors.New("gvx: Restore continues the snapshot's own init; leave Cmd, Entrypoint and KeepAlive unset")
		}
		a = append(a, "--restore", c.Restore)
	}
	switch c.Platform {
	case PlatformAuto:
	case PlatformSystrap, PlatformKVM, PlatformPtrace:
		a = append(a, "--platform", string(c.Platform))
	default:
		return nil, fmt.Errorf("gvx: unknown Platform %q; use PlatformAuto, PlatformSystrap, PlatformKVM or PlatformPtrace", c.Platform)
	}
	switch c.Spin {
	case SpinAuto: // spin unless $GVX_SPIN says otherwise; New turns it into SpinOff without a spin slot
	case SpinOn:
		a = append(a, "--spin=true")
	case SpinOff:
		a = append(a, "--spin=false")
	default:
		return nil, fmt.Errorf("gvx: unknown Spin %d; use SpinAuto, SpinOn or SpinOff", c.Spin)
	}
	net, err := c.networkArgs()
	if err != nil {
		return nil, err
	}
	a = append(a, net...)
	if c.AllowSUID {
		a = append(a, "--allow-suid")
	}
	for _, m := range c.Mounts {
		spec, err := m.flag()
		if err != nil {
			return nil, err
		}
		a = append(a, "--mount", spec)
	}
	if r := c.Resources; r.MemoryBytes > 0 {
		a = append(a, "--memory", strconv.FormatUint(r.MemoryBytes, 10))
	}
	if r := c.Resources; r.CPUMillis > 0 {
		a = append(a, "--cpus", strconv.FormatFloat(float64(r.CPUMillis)/1000, 'f', 3, 64))
	}
	if r := c.Resources; len(r.CPUSet) > 0 {
		list := make([]string, len(r.CPUSet))
		for i, cpu := range r.CPUSet {
			if cpu < 0 {
				return nil, fmt.Errorf("gvx: Resources.CPUSet names CPU %d; host CPUs are numbered from 0", cpu)
			}
			list[i] = strconv.Itoa(cpu)
		}
		a = append(a, "--cpuset-cpus", strings.Join(list, ","))
	}
	if r := c.Resources; r.PidsLimit != 0 {
		a = append(a, "--pids-limit", strconv.Itoa(r.PidsLimit))
	}
	if c.Resources.CPUMillis < 0 || c.Resources.PidsLimit < -1 || c.Timeout < 0 {
		return nil, errors.New("gvx: Resources and Timeout must not be negative (Resources.PidsLimit -1 means no limit)")
	}
	if c.Timeout > 0 {
		a = append(a, "--timeout", c.Timeout.String())
	}
	if c.Stdin != nil {
		a = append(a, "--interactive")
	}
	a = append(a, c.extraArgs...)
	a = append(a, c.OCIImage)
	if c.EntrypointSet && len(c.Entrypoint) > 1 {
		a = append(a, c.Entrypoint[1:]...)
	}
	a = append(a, c.Cmd...)
	if c.KeepAlive && (len(c.Cmd) > 0 || c.EntrypointSet) {
		return nil, errors.New("gvx: KeepAlive runs an idle init; leave Cmd and Entrypoint unset")
	}
	return a, nil
}

// networkArgs renders the network fields as `rungv run` flags.
func (c *Config) networkArgs() ([]string, error) {
	var a []string
	switch c.NetworkMode {
	case "", NetModeNone:
		if len(c.AllowNet) > 0 || c.HostLoopback {
			return nil, errors.New("gvx: AllowNet and HostLoopback restrict the NAT; set NetworkMode to NetModeNAT")
		}
	case NetModeNAT:
		a = append(a, "--network", "nat")
	default:
		return nil, fmt.Errorf("gvx: unknown NetworkMode %q; use NetModeNone or NetModeNAT", c.NetworkMode)
	}
	for _, r := range c.AllowNet {
		a = append(a, "--allow-net", r)
	}
	if c.HostLoopback {
		a = append(a, "--host-loopback")
	}
	for _, m := range c.Ports {
		p, err := m.flag()
		if err != nil {
			return nil, err
		}
		a = append(a, "--publish", p)
	}
	if c.NetRaw {
		a = append(a, "--net-raw")
	}
	if c.NFTables {
		a = append(a, "--nftables")
	}
	if c.AllowPacketSocketWrite {
		if !c.NetRaw {
			return nil, errors.New("gvx: AllowPacketSocketWrite needs NetRaw; set it too")
		}
		a = append(a, "--allow-packet-socket-write")
	}
	return a, nil
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
