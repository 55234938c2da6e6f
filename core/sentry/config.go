package sentry

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"z.gfire.dev/gvx/core/lockdown"
)

// Platform names how the Sentry intercepts guest system calls.
type Platform string

// Platforms.
const (
	// PlatformSystrap uses seccomp traps in ptraced stub processes. It needs
	// no privilege and is the default.
	PlatformSystrap Platform = "systrap"
	// PlatformPtrace uses PTRACE_SYSEMU. Slow; useful where systrap is not.
	PlatformPtrace Platform = "ptrace"
	// PlatformKVM uses hardware virtualisation through /dev/kvm, which must
	// be readable and writable by the process.
	PlatformKVM Platform = "kvm"
)

// Config describes a sandbox. The zero value is not usable: Image is
// required.
type Config struct {
	// Image is an EROFS image, the read-only lower layer of the root
	// filesystem. New duplicates the descriptor; the caller may close Image
	// after New returns. It must be uncompressed with 4 KiB blocks, no inline
	// file tails and no xattrs (core/erofs writes such images; so does
	// `mkfs.erofs -E noinline_data -x -1`).
	Image *os.File

	// Platform selects the syscall interception platform; empty means
	// PlatformSystrap.
	Platform Platform

	// Hostname is the guest's hostname; empty means "sandbox".
	Hostname string

	// CPUs is the number of CPUs the guest sees (nproc, /proc/cpuinfo,
	// sched_getaffinity); it does not limit CPU time. 0 means the size of
	// CPUSet, or the host's count without one; at most MaxCPUs.
	CPUs int

	// CPUSet lists the host CPUs this process and its platform stubs may
	// run on, as docker run --cpuset-cpus does for a container; each must
	// be one the process may run on now. Empty: unchanged.
	CPUSet []int

	// NoSpinning turns off systrap's fast path, in which the Sentry's and
	// the stubs' threads spin, instead of sleeping, while they wait for
	// each other. Spinning makes a lone busy sandbox's system calls 2–5×
	// faster; with more busy sandboxes than CPUs the spinners take the CPU
	// the others need (8 sandboxes running system-call loops on 2 CPUs
	// took 3× as long with it). Other platforms ignore it.
	NoSpinning bool

	// MemoryLimit is the sandbox's total memory in bytes: guest processes,
	// tmpfs and the root filesystem's writable layer together. The guest
	// sees it as MemTotal; when usage exceeds it the process with the
	// largest resident set is killed inside the sandbox (SIGKILL), as the
	// Linux OOM killer would, within milliseconds. A single system call
	// that fills a huge buffer can overshoot until it returns; a hard
	// ceiling at the next GiB above the limit bounds that (allocations
	// beyond it fail inside the sandbox). 0 means no limit; at most
	// MaxMemoryLimit.
	MemoryLimit uint64

	// PidsLimit caps the number of tasks (threads included) in the sandbox.
	// fork, vfork, clone and clone3 fail with EAGAIN at the limit; the guest
	// cannot raise it, not even as root. Processes started from the host
	// (Start, Exec) are not refused, so the host can always get in to clean
	// up. 0 means DefaultPidsLimit; NoPidsLimit (-1) means no limit.
	PidsLimit int

	// Volumes are ext4 volumes mounted into the guest (see Volume). New
	// opens them, before any lockdown; Close writes them back and closes
	// them cleanly (a killed process leaves a journal that replays).
	Volumes []Volume

	// NetRaw lets guest root open raw and packet sockets.
	NetRaw bool

	// AllowPacketSocketWrite lets packet sockets (AF_PACKET, which need
	// NetRaw) send as well as receive. Off, they only capture.
	AllowPacketSocketWrite bool

	// AllowSUID honours set-user-ID and set-group-ID bits on guest
	// executables.
	AllowSUID bool

	// NFTables gives every network stack of the sandbox gVisor's nftables
	// and lets the guest program it over netlink (Docker's iptables-nft
	// needs it). gVisor marks its nftables as not yet thread-safe. Enabling
	// it is process-wide and cannot be undone.
	NFTables bool

	// ConfigureNetwork, if set, is called with the root network stack after
	// the loopback interface is up and before any guest code runs. It is the
	// hook for adding NICs (eth0, NAT) to the sandbox. Network namespaces
	// created inside the guest get only their own loopback interface.
	ConfigureNetwork func(*stack.Stack) error

	// DisableLockdown skips the host lockdown (core/lockdown). Only for tests
	// and debugging: without it a Sentry bug is a host bug.
	DisableLockdown bool

	// Lockdown adds to the host seccomp filter; the platform's rules are
	// filled in by the sandbox.
	Lockdown lockdown.Options

	// LogWriter receives gVisor's log. Nil discards it. The log is
	// process-wide.
	LogWriter io.Writer

	// VolumeErrors receives a line for each corruption a volume meets
	// (up to maxVolumeErrors per volume), naming the volume and what is
	// wrong: the guest sees only EIO. Nil discards them.
	VolumeErrors io.Writer

	// Debug raises gVisor's log level to debug.
	Debug bool
}

// Bounds and defaults of Config's resource fields.
const (
	// MaxCPUs is the most CPUs a guest may see. glibc's cpu_set_t holds
	// 1024 CPUs (CPU_SETSIZE), so guest programs that read their affinity
	// into one fail beyond it, and the Sentry sets up per-CPU state for
	// every CPU it shows, which costs start-up time and memory that grow
	// faster than the count. The count
	// is what the guest sees, not CPU time: more than the host has gains
	// nothing.
	MaxCPUs = 1024

	// MaxMemoryLimit is the largest MemoryLimit: 1 TiB. The Sentry grows
	// its memory file to the ceiling above the limit and maps it into its
	// own address space up front; from tens of TiB on that fails with
	// ENOMEM, depending on the host. A fixed bound, rather than the host's
	// RAM, keeps a configuration valid on every host: the limit is a
	// ceiling, not a reservation.
	MaxMemoryLimit = 1 << 40

	// DefaultPidsLimit is the PidsLimit of a Config that sets none. Under
	// systrap every guest address space is a stub process on the host,
	// with more stub processes for its threads, and systrap keeps them for
	// reuse until the sandbox ends: without a limit a fork bomb fills the
	// host's process table (default pid_max: 32768), bounded only by
	// memory. With one the stubs stay within a small multiple of it.
	// 2048 is podman's default, which docker run (no limit) and Kubernetes
	// (none unless the node sets one) do not have; it leaves room for
	// Docker inside the sandbox, where dockerd, containerd, a shim per
	// container and a compose project's processes and threads take a few
	// hundred. Raise it with PidsLimit, or turn it off with NoPidsLimit.
	DefaultPidsLimit = 2048

	// NoPidsLimit as PidsLimit turns the limit off.
	NoPidsLimit = -1
)

// A LimitError is a resource field of Config outside its bounds.
type LimitError struct {
	Field   string // the Config field: "CPUs", "CPUSet", "MemoryLimit" or "PidsLimit"
	Value   string // its value
	Problem string // what is wrong, naming the bound: "is more than ..."
	Fix     string // what to give instead
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("sentry: %s %s %s; %s", e.Field, e.Value, e.Problem, e.Fix)
}

// CheckLimits reports the first resource field of c (CPUs, CPUSet,
// MemoryLimit, PidsLimit) outside what a sandbox supports, as a
// *LimitError. New and Restore check it; a caller that builds a Config
// from user input may call it first, to refuse the input before any work.
func (c Config) CheckLimits() error {
	switch {
	case c.CPUs < 0:
		return &LimitError{"CPUs", strconv.Itoa(c.CPUs), "is negative", fmt.Sprintf("give 1 to %d, or 0 for the host's count", MaxCPUs)}
	case c.CPUs > MaxCPUs:
		return &LimitError{"CPUs", strconv.Itoa(c.CPUs), fmt.Sprintf("is more than the %d CPUs a sandbox may see", MaxCPUs),
			fmt.Sprintf("give at most %d: the count is what the guest sees, not CPU time", MaxCPUs)}
	}
	if len(c.CPUSet) > 0 {
		var allowed unix.CPUSet
		if err := unix.SchedGetaffinity(0, &allowed); err != nil {
			return fmt.Errorf("sentry: reading this process's CPU affinity: %w", err)
		}
		for _, cpu := range c.CPUSet {
			if cpu < 0 || cpu >= maxHostCPU || !allowed.IsSet(cpu) {
				return &LimitError{"CPUSet", fmt.Sprint(c.CPUSet), fmt.Sprintf("names CPU %d, which this process may not run on (it may use %s)", cpu, FormatCPUSet(&allowed)),
					"pick CPUs from that list"}
			}
		}
	}
	switch mem := strconv.FormatUint(c.MemoryLimit, 10); {
	case c.MemoryLimit != 0 && c.MemoryLimit < minMemoryLimit:
		return &LimitError{"MemoryLimit", mem, fmt.Sprintf("is below the minimum of %d MiB", minMemoryLimit>>20),
			fmt.Sprintf("give at least %d MiB, or 0 for no limit", minMemoryLimit>>20)}
	case c.MemoryLimit > MaxMemoryLimit:
		return &LimitError{"MemoryLimit", mem, fmt.Sprintf("is more than the maximum of %d TiB", MaxMemoryLimit>>40),
			fmt.Sprintf("give at most %d TiB, or 0 for no limit", MaxMemoryLimit>>40)}
	}
	if c.PidsLimit < NoPidsLimit {
		return &LimitError{"PidsLimit", strconv.Itoa(c.PidsLimit), "is negative",
			fmt.Sprintf("give a count of tasks, or %d for no limit", NoPidsLimit)}
	}
	return nil
}

// ErrBusy is returned by New while another Sandbox is live in the process.
var ErrBusy = errors.New("sentry: another sandbox is live in this process; a process hosts one sandbox at a time")

// defaultHostname is the guest hostname when Config.Hostname is empty.
const defaultHostname = "sandbox"

// withDefaults validates c and returns a copy with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Image == nil {
		return c, errors.New("sentry: Config.Image is nil; open an EROFS image and pass it")
	}
	switch c.Platform {
	case "":
		c.Platform = PlatformSystrap
	case PlatformSystrap, PlatformPtrace, PlatformKVM:
	default:
		return c, fmt.Errorf("sentry: unknown platform %q; use %q, %q or %q", c.Platform, PlatformSystrap, PlatformPtrace, PlatformKVM)
	}
	if c.Hostname == "" {
		c.Hostname = defaultHostname
	}
	if err := CheckHostname(c.Hostname); err != nil {
		return c, fmt.Errorf("sentry: %w", err)
	}
	if err := c.CheckLimits(); err != nil {
		return c, err
	}
	if c.CPUs == 0 {
		var set unix.CPUSet
		for _, cpu := range c.CPUSet {
			set.Set(cpu)
		}
		c.CPUs = min(runtime.NumCPU(), MaxCPUs)
		if n := set.Count(); n > 0 {
			c.CPUs = n
		}
	}
	if c.PidsLimit == 0 {
		c.PidsLimit = DefaultPidsLimit
	}
	if err := validateVolumes(c.Volumes); err != nil {
		return c, err
	}
	return c, nil
}

// CheckHostname refuses what docker run --hostname refuses: a name that is
// not dot-separated RFC 1123 labels (letters, digits and inner hyphens), or
// is longer than the 64 bytes uname's nodename holds.
func CheckHostname(h string) error {
	const want = "give letters, digits, hyphens and dots, such as box-1.example, at most 64 bytes"
	if len(h) > 64 {
		return fmt.Errorf("hostname %.64q… is %d bytes long; %s", h, len(h), want)
	}
	for _, label := range strings.Split(h, ".") {
		ok := label != "" && label[0] != '-' && label[len(label)-1] != '-'
		for _, r := range label {
			ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-')
		}
		if !ok {
			return fmt.Errorf("hostname %q is not a valid host name; %s", h, want)
		}
	}
	return nil
}
