package sentry

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// setAffinityAllThreads sets the CPU affinity of every thread of this
// process. The Go runtime runs the system call on each of its threads while
// it holds back thread creation (as lockdown does for prctl), so no thread
// made meanwhile keeps the old mask.
func setAffinityAllThreads(set *unix.CPUSet) error {
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(*set), uintptr(unsafe.Pointer(set)))
	if errno != 0 {
		return errno
	}
	return nil
}
