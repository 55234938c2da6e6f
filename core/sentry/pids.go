package sentry

import (
	"sync"

	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

// pidsLimits maps a *kernel.Kernel to its task limit (int).
//
// gVisor's own pids controller lives in cgroupfs, which guest root can
// remount or escape. The limit here is enforced by the loader's wrapper
// around the task-creating system calls, out of the guest's reach.
var pidsLimits sync.Map

// taskCreatingSyscalls are the system calls that add a task.
var taskCreatingSyscalls = []string{"clone", "clone3", "fork", "vfork"}

// installPidsLimiter wraps the task-creating system calls of every
// registered syscall table with the limit check.
//
// Preconditions: no kernel is running (the tables are process-wide).
func installPidsLimiter() {
	for _, table := range kernel.SyscallTables() {
		for _, name := range taskCreatingSyscalls {
			sysno, err := table.LookupNo(name)
			if err != nil {
				continue // not on this architecture (arm64 has no fork)
			}
			sc := table.Table[sysno]
			sc.Fn = limitTasks(sc.Fn)
			table.Table[sysno] = sc
		}
		// Rebuild the fast lookup array from the edited map.
		table.Init()
	}
}

// limitTasks returns fn guarded by the task limit of the caller's kernel.
//
// The check and the creation are not atomic: concurrent clones may each
// pass, so the count can exceed the limit by the number of tasks cloning at
// that instant (bounded by the CPUs). Holding a lock across the clone is not
// an option, as vfork blocks until the child execs.
func limitTasks(fn kernel.SyscallFn) kernel.SyscallFn {
	return func(t *kernel.Task, sysno uintptr, args arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
		if v, ok := pidsLimits.Load(t.Kernel()); ok {
			if t.Kernel().TaskSet().Root.NumTasks() >= v.(int) {
				return 0, nil, linuxerr.EAGAIN
			}
		}
		return fn(t, sysno, args)
	}
}

// setPidsLimit caps the tasks of k at n.
func setPidsLimit(k *kernel.Kernel, n int) { pidsLimits.Store(k, n) }

// clearPidsLimit removes k's cap.
func clearPidsLimit(k *kernel.Kernel) { pidsLimits.Delete(k) }
