package gvx

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// liveSandboxes counts this process's rungv children that have started and
// not yet exited, for SpinAuto.
var liveSandboxes atomic.Int64

// spinFits reports whether a sandbox may spin when it makes live sandboxes
// in all on cpus CPUs (see SpinAuto).
func spinFits(live int64, cpus int) bool { return live <= 2*int64(cpus) }

// usableCPUs returns how many CPUs this process may run on now.
func usableCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() == 0 {
		return 1
	}
	return set.Count()
}
