package lockdown

import (
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/seccomp"
)

// extraRules returns the system calls gvx needs beyond gVisor's list.
//
// The Sentry, the platforms and netstack are covered by gVisor's rules; the
// EROFS lower layer is read through a mapping of the image made before
// lockdown, the writable layers live in the memory file, and the sandbox's
// own bookkeeping (memory accounting, stdio relays) uses only descriptors
// that are already open. What remains is the control server: Go's
// net.Listener.Accept names both ends of every accepted connection.
func extraRules(opts Options) seccomp.SyscallRules {
	r := seccomp.NewSyscallRules()
	if opts.ControlFD > 0 {
		r.Set(unix.SYS_GETSOCKNAME, seccomp.MatchAll{})
		r.Set(unix.SYS_GETPEERNAME, seccomp.MatchAll{})
	}
	return r
}
