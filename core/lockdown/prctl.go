package lockdown

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// allThreadsPrctl runs prctl(option, arg2, 0, 0, 0) on every thread of the
// process: no_new_privs and the ambient and bounding capability sets are per
// thread, and the Go runtime has many threads.
func allThreadsPrctl(option int, arg2 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, uintptr(option), arg2, 0, 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
