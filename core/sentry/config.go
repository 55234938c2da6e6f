package sentry

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

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
	// CPUSet, or the host's count without one.
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
	// beyond it fail inside the sandbox). 0 means no limit.
	MemoryLimit uint64

	// PidsLimit caps the number of tasks (threads included) in the sandbox.
	// fork, vfork, clone and clone3 fail with EAGAIN at the limit; the guest
	// cannot raise it, not even as root. Processes started from the host
	// (Start, Exec) are not refused, so the host can always get in to clean
	// up. 0 means no limit.
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

	// Debug raises gVisor's log level to debug.
	Debug bool
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
	if len(c.Hostname) > 64 {
		return c, fmt.Errorf("sentry: hostname %q is longer than 64 bytes", c.Hostname)
	}
	if c.CPUs < 0 {
		return c, fmt.Errorf("sentry: CPUs is %d; use a positive count or 0 for the host's", c.CPUs)
	}
	var set unix.CPUSet
	for _, cpu := range c.CPUSet {
		if cpu < 0 || cpu >= maxHostCPU {
			return c, fmt.Errorf("sentry: CPUSet names CPU %d; host CPUs are numbered 0 to %d", cpu, maxHostCPU-1)
		}
		set.Set(cpu)
	}
	if c.CPUs == 0 {
		c.CPUs = runtime.NumCPU()
		if n := set.Count(); n > 0 {
			c.CPUs = n
		}
	}
	if c.PidsLimit < 0 {
		return c, fmt.Errorf("sentry: PidsLimit is %d; use a positive count or 0 for none", c.PidsLimit)
	}
	if err := validateVolumes(c.Volumes); err != nil {
		return c, err
	}
	if c.MemoryLimit != 0 && c.MemoryLimit < minMemoryLimit {
		return c, fmt.Errorf("sentry: MemoryLimit %d is below the minimum of %d bytes", c.MemoryLimit, minMemoryLimit)
	}
	return c, nil
}
