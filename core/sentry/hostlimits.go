package sentry

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/internal/hostlimits"
)

// withTaskHint returns "; " and hostlimits.TaskHint, or "" when no host
// limit explains a refused process or thread.
//
// Preconditions: the host filter is not installed (it reads files).
func withTaskHint() string {
	if hint := hostlimits.TaskHint(); hint != "" {
		return "; " + hint
	}
	return ""
}

// withPlatformHint returns "; " and why the host refused what the
// platform asked for at its start: ptrace, which systrap attaches to its
// own stub processes with (a refusal is EPERM, not a limit), or else the
// task limits of withTaskHint.
//
// Preconditions: the host filter is not installed (it reads files).
func withPlatformHint(err error) string {
	if !errors.Is(err, unix.EPERM) && !strings.Contains(err.Error(), "unable to attach") {
		return withTaskHint()
	}
	hint := "; the host refused ptrace, which the systrap platform needs to attach to the sandbox's own stub processes (its children)"
	if data, rerr := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); rerr == nil {
		if scope, perr := strconv.Atoi(strings.TrimSpace(string(data))); perr == nil && scope >= 2 {
			return hint + fmt.Sprintf(": Yama's kernel.yama.ptrace_scope is %d, which allows no attach (3) or only with CAP_SYS_PTRACE (2); set it to 1 or 0", scope)
		}
	}
	return hint + ": a seccomp profile denies it (a container's: Docker's default allows ptrace on kernels 4.8 and later, a custom one must too), or an LSM (AppArmor, SELinux) does; allow ptrace for rungv"
}

// hostTaskRefusals are words of systrap's errors for a stub process or
// thread it could not get from the host, or a subprocess out of guest
// contexts. They carry no errno, and the Sentry panics on a system call
// error without one: a fork-heavy guest under a host pids limit took its
// whole sandbox down with "panic: Unknown syscall 56 error".
var hostTaskRefusals = []string{"failed to get clone", "creating stub process", "too many active tasks"}

// refusedByHost reports whether err is one of hostTaskRefusals.
func refusedByHost(err error) bool {
	msg := err.Error()
	for _, words := range hostTaskRefusals {
		if strings.Contains(msg, words) {
			return true
		}
	}
	return false
}

var warnHostRefusal sync.Once

// hostRefusalsAsEAGAIN returns fn with the host's refusals to back a new
// task turned into EAGAIN, what Linux's clone returns at a pids limit: the
// guest's fork fails ("Resource temporarily unavailable") and the sandbox
// lives on, unless rungv's own Go runtime is refused a thread next.
func hostRefusalsAsEAGAIN(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		rv, ctl, err := fn(t, sysno, args)
		if err != nil && refusedByHost(err) {
			warnHostRefusal.Do(func() {
				log.Warningf("the host refused a process or thread for a new guest task (%v); the guest's clone fails with EAGAIN", err)
			})
			return 0, nil, linuxerr.EAGAIN
		}
		return rv, ctl, err
	}
}
