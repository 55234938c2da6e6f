package lockdown

import (
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/seccomp"
)

// extraRulesVersion changes whenever extraRules changes shape, so
// precompiled programs built from older rules are not used.
const extraRulesVersion = 1

// extraRules returns the system calls gvx needs beyond gVisor's list.
//
// The Sentry, the platforms and netstack are covered by gVisor's rules; the
// EROFS lower layer is read through a mapping of the image made before
// lockdown, the writable layers live in the memory file, and the sandbox's
// own bookkeeping (memory accounting, stdio relays) uses only descriptors
// that are already open. What remains:
//
//   - fcntl(F_DUPFD_CLOEXEC): a process started after lockdown may get host
//     descriptors as its stdio (a terminal, descriptors passed over the
//     control socket); the sandbox imports a close-on-exec duplicate and
//     leaves the caller's descriptor alone. gVisor allows only dup3 with a
//     chosen target number, which cannot be picked race-free.
//   - The control server: Go's net.Listener.Accept names both ends of every
//     accepted connection (getsockname, getpeername).
func extraRules(opts Options) seccomp.SyscallRules {
	r := seccomp.NewSyscallRules()
	r.Set(unix.SYS_FCNTL, seccomp.PerArg{
		seccomp.NonNegativeFD{},
		seccomp.EqualTo(unix.F_DUPFD_CLOEXEC),
		seccomp.AnyValue{},
	})
	if opts.ControlFD > 0 {
		r.Set(unix.SYS_GETSOCKNAME, seccomp.MatchAll{})
		r.Set(unix.SYS_GETPEERNAME, seccomp.MatchAll{})
	}
	return r
}
