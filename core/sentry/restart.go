package sentry

import (
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

// openSyscalls are the system calls that open a file, and so may wait for a
// FIFO's other end.
var openSyscalls = []string{"open", "openat", "openat2", "creat"}

// installOpenRestart makes an open that a signal interrupts while it waits
// restart when the signal's handler asked for SA_RESTART, as Linux's does
// (its FIFO open returns ERESTARTSYS). gVisor's FIFO open returns EINTR
// outright, so a program that does not retry fails when a signal lands in
// the wait: runc's init, opening its exec FIFO while Go's preemption signals
// arrive, fails `docker run` with "open exec fifo: interrupted system call"
// on a busy host.
//
// Preconditions: no kernel is running (the tables are process-wide).
func installOpenRestart() { wrapSyscalls(openSyscalls, restartInterruptedOpen) }

// restartInterruptedOpen returns fn with EINTR turned into ERESTARTSYS: the
// task's signal delivery then restarts the call or returns EINTR, by the
// handler's SA_RESTART, as for Linux's interrupted opens.
func restartInterruptedOpen(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		rv, ctl, err := fn(t, sysno, args)
		if linuxerr.Equals(linuxerr.EINTR, err) {
			return rv, ctl, linuxerr.ERESTARTSYS
		}
		return rv, ctl, err
	}
}
