package lockdown

import (
	"runtime"
	"time"
)

// preload makes the Go runtime and standard library do now what they would
// otherwise do lazily or periodically with system calls that lockdown
// denies.
//
//   - The local time zone: the first time.Now().Zone(), time.Local or log
//     timestamp opens /etc/localtime, and gVisor's log formats local times.
//   - GOMAXPROCS: since Go 1.25 the runtime's sysmon thread re-derives it
//     every so often with sched_getaffinity(2) and by reading cgroup files.
//     Setting it explicitly turns that off; we keep the current value.
func preload() {
	time.Now().Zone()
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
}
