package lockdown

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/seccomp"
)

// JanitorOptions describe a janitor: a process that blocks reading a pipe
// until its other end closes, then removes files by path (lstat, unlink),
// as rungv's socket janitor does once rungv has exited.
type JanitorOptions struct {
	// PipeFD is the only descriptor the janitor reads.
	PipeFD int

	// KeepDACOverride keeps CAP_DAC_OVERRIDE in the effective and
	// permitted sets. Only for files in a directory that the process may
	// write or search through that capability alone (see NeedsDACOverride).
	KeepDACOverride bool

	// TrapViolations is as Options.TrapViolations.
	TrapViolations bool
}

// InstallJanitor confines the calling process to what a janitor does:
// PR_SET_NO_NEW_PRIVS, every capability dropped (but CAP_DAC_OVERRIDE with
// opts.KeepDACOverride), and a seccomp allowlist of read on opts.PipeFD,
// lstat and unlink by path, write on stderr, exit, and what the Go runtime
// does on its own once started (threads, memory, timers, signals). It
// cannot be undone.
func InstallJanitor(opts JanitorOptions) error {
	if opts.PipeFD < 0 {
		return fmt.Errorf("lockdown: janitor pipe descriptor %d is not a descriptor", opts.PipeFD)
	}
	progOpts := seccomp.ProgramOptions{
		DefaultAction: seccomp.KillProcess,
		BadArchAction: seccomp.KillProcess,
		HotSyscalls:   []uintptr{unix.SYS_FUTEX, unix.SYS_NANOSLEEP},
	}
	if opts.TrapViolations {
		progOpts.DefaultAction = seccomp.Trap
	}
	wakeFD, err := netpollWakeFD()
	if err != nil {
		return err
	}
	insns, _, err := (&seccomp.Program{
		RuleSets: []seccomp.RuleSet{{Rules: janitorRules(opts.PipeFD, wakeFD), Action: seccomp.Allow}},
		Options:  progOpts,
	}).Build()
	if err != nil {
		return fmt.Errorf("lockdown: compiling the janitor's seccomp allowlist: %w", err)
	}
	var keep uint64
	if opts.KeepDACOverride {
		keep = 1 << unix.CAP_DAC_OVERRIDE
	}
	if err := dropPrivileges(keep); err != nil {
		return err
	}
	preload()
	if err := seccomp.SetFilter(insns); err != nil {
		return fmt.Errorf("lockdown: installing the janitor's seccomp filter: %w", err)
	}
	return nil
}

// atFDCWD is AT_FDCWD as the kernel sees it in a system call's argument
// register: Go passes the int sign-extended.
var atFDCWD = func() uintptr { fd := unix.AT_FDCWD; return uintptr(fd) }()

// netpollWakeFD returns the eventfd with which the Go runtime wakes its
// netpoller (it writes and reads 8 bytes on it), or -1 if the runtime has
// none: it makes one with the first file opened, and the janitor opens no
// more.
func netpollWakeFD() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("lockdown: listing the janitor's descriptors: %w", err)
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target == "anon_inode:[eventfd]" {
			return fd, nil
		}
	}
	return -1, nil
}

// janitorRules is the janitor's allowlist; wakeFD is as netpollWakeFD
// returns.
func janitorRules(pipeFD, wakeFD int) seccomp.SyscallRules {
	read := seccomp.Or{seccomp.PerArg{seccomp.EqualTo(pipeFD)}}
	write := seccomp.Or{seccomp.PerArg{seccomp.EqualTo(2)}} // error reports, runtime crashes
	if wakeFD >= 0 {
		read = append(read, seccomp.PerArg{seccomp.EqualTo(wakeFD), seccomp.AnyValue{}, seccomp.EqualTo(8)})
		write = append(write, seccomp.PerArg{seccomp.EqualTo(wakeFD), seccomp.AnyValue{}, seccomp.EqualTo(8)})
	}
	return seccomp.MakeSyscallRules(map[uintptr]seccomp.SyscallRule{
		// The janitor's own work.
		unix.SYS_READ:  read,
		unix.SYS_WRITE: write,
		unix.SYS_NEWFSTATAT: seccomp.PerArg{
			seccomp.EqualTo(atFDCWD),
			seccomp.AnyValue{},
			seccomp.AnyValue{},
			seccomp.EqualTo(unix.AT_SYMLINK_NOFOLLOW),
		},
		unix.SYS_UNLINKAT: seccomp.PerArg{
			seccomp.EqualTo(atFDCWD),
			seccomp.AnyValue{},
			seccomp.EqualTo(0), // files only, never AT_REMOVEDIR
		},
		unix.SYS_EXIT_GROUP: seccomp.MatchAll{},

		// The Go runtime: scheduling and sleeping (futex, sysmon's
		// nanosleep), memory (the heap and the collector), preemption
		// signals to its own threads, and new threads (clone with the
		// runtime's flags, which on amd64 then set their TLS and signal
		// state, and exit).
		unix.SYS_FUTEX: seccomp.PerArg{
			seccomp.AnyValue{},
			seccomp.BitsAllowlist(linux.FUTEX_WAIT | linux.FUTEX_WAKE | linux.FUTEX_PRIVATE_FLAG),
		},
		unix.SYS_NANOSLEEP:      seccomp.MatchAll{},
		unix.SYS_SCHED_YIELD:    seccomp.MatchAll{},
		unix.SYS_CLOCK_GETTIME:  seccomp.MatchAll{},
		unix.SYS_MMAP:           seccomp.PerArg{seccomp.AnyValue{}, seccomp.AnyValue{}, seccomp.MaskedEqual(unix.PROT_EXEC, 0)}, // never executable
		unix.SYS_MUNMAP:         seccomp.MatchAll{},
		unix.SYS_MADVISE:        seccomp.MatchAll{},
		unix.SYS_RT_SIGRETURN:   seccomp.MatchAll{},
		unix.SYS_RT_SIGPROCMASK: seccomp.MatchAll{},
		unix.SYS_SIGALTSTACK:    seccomp.MatchAll{},
		unix.SYS_GETPID:         seccomp.MatchAll{},
		unix.SYS_GETTID:         seccomp.MatchAll{},
		unix.SYS_TGKILL:         seccomp.PerArg{seccomp.EqualTo(unix.Getpid())},
		unix.SYS_EXIT:           seccomp.MatchAll{},
		unix.SYS_ARCH_PRCTL:     seccomp.PerArg{seccomp.EqualTo(linux.ARCH_SET_FS)},
		unix.SYS_CLONE: seccomp.PerArg{
			seccomp.EqualTo(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SETTLS | unix.CLONE_SIGHAND | unix.CLONE_SYSVSEM | unix.CLONE_THREAD),
		},
		// The netpoller, which the runtime starts on the first file it
		// opens: sysmon and idle threads poll it and wake each other
		// through wakeFD (read and write above).
		unix.SYS_EPOLL_PWAIT: seccomp.MatchAll{},
	})
}

// NeedsDACOverride reports whether the calling process could remove a file
// it created in dir only through CAP_DAC_OVERRIDE: it has that capability,
// and the kernel, asked with no effective capability, refuses it write and
// search permission on dir (or on a directory on the way there). A missing
// dir needs nothing: there is nothing left to remove.
func NeedsDACOverride(dir string) (bool, error) {
	has, err := hasEffectiveCap(unix.CAP_DAC_OVERRIDE)
	if err != nil || !has {
		return false, err
	}
	var accessErr error
	if err := withoutEffectiveCaps(func() {
		accessErr = unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS)
	}); err != nil {
		return false, fmt.Errorf("lockdown: lowering capabilities to check access to %s: %w", dir, err)
	}
	return errors.Is(accessErr, unix.EACCES) || errors.Is(accessErr, unix.EPERM), nil
}

// withoutEffectiveCaps runs f on one thread whose effective capability set
// is empty for the duration (its permitted set is kept), so that the kernel
// checks f's system calls as it would for an unprivileged process with the
// same IDs.
func withoutEffectiveCaps(f func()) error {
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var saved capData
	if err := unix.Capget(&hdr, &saved[0]); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	lowered := saved
	for i := range lowered {
		lowered[i].Effective = 0
	}
	// unix.Capset changes the calling thread only.
	if err := unix.Capset(&hdr, &lowered[0]); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	f()
	if err := unix.Capset(&hdr, &saved[0]); err != nil {
		// The thread stays locked, so it ends with this goroutine rather
		// than run others with fewer capabilities than the rest.
		return err
	}
	runtime.UnlockOSThread()
	return nil
}
