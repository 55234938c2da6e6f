package sentry

import (
	"sync"

	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

// pidsLimits maps a *kernel.Kernel to its *taskLimit.
//
// gVisor's own pids controller lives in cgroupfs, which guest root can
// remount or escape. The limit here is enforced by the loader's wrapper
// around the task-creating system calls, out of the guest's reach.
var pidsLimits sync.Map

// taskLimit caps the number of tasks of one kernel.
type taskLimit struct {
	max int

	mu sync.Mutex
	// inflight counts admitted clones that have not returned yet; their
	// tasks may not be in the task set yet.
	inflight int
}

// admit reserves room for one new task of k, reporting false at the limit.
func (l *taskLimit) admit(k *kernel.Kernel) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k.TaskSet().Root.NumTasks()+l.inflight >= l.max {
		return false
	}
	l.inflight++
	return true
}

// done releases a reservation once the clone returned; its task, if any,
// is in the task set by then.
func (l *taskLimit) done() {
	l.mu.Lock()
	l.inflight--
	l.mu.Unlock()
}

// taskCreatingSyscalls are the system calls that add a task.
var taskCreatingSyscalls = []string{"clone", "clone3", "fork", "vfork"}

// installPidsLimiter wraps the task-creating system calls of every
// registered syscall table with the limit check.
//
// Preconditions: no kernel is running (the tables are process-wide).
func installPidsLimiter() {
	wrapSyscalls(taskCreatingSyscalls, func(fn kernel.SyscallFn) kernel.SyscallFn { return limitTasks(hostRefusalsAsEAGAIN(fn)) })
}

// limitTasks returns fn guarded by the task limit of the caller's kernel.
// Reservations make the limit exact under concurrent clones; a clone that
// fails for another reason only held its reservation while it ran.
func limitTasks(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		v, ok := pidsLimits.Load(t.Kernel())
		if !ok {
			return fn(t, sysno, args)
		}
		l := v.(*taskLimit)
		if !l.admit(t.Kernel()) {
			return 0, nil, linuxerr.EAGAIN
		}
		defer l.done()
		return fn(t, sysno, args)
	}
}

// setPidsLimit caps the tasks of k at n.
func setPidsLimit(k *kernel.Kernel, n int) { pidsLimits.Store(k, &taskLimit{max: n}) }

// clearPidsLimit removes k's cap.
func clearPidsLimit(k *kernel.Kernel) { pidsLimits.Delete(k) }
