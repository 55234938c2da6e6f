package gvx

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The spin budget. A sandbox whose Spin is unset (see Config) spins only
// when the host's CPUs are not oversubscribed as it starts (hostBusy), and
// only while no more than twice as many sandboxes as there are CPUs hold a
// spin slot on this host, in any process: a Ray node's actors, several drivers and the tests' cluster
// of raylets share the CPUs, and a budget per process would let each of them
// spin its own first sandboxes until the spinners starve the rest.
//
// A slot is an exclusive flock on one of the files slot-0 … slot-(2×CPUs−1)
// in spinDir, held by the process that started the sandbox for as long as
// the sandbox runs. A flock ends with its open file, so the budget cannot
// leak: a process killed with -9 gives its slots back with its files.

// spinDir is where the slot files are; empty means the per-user directory
// under the host's temporary directory. Tests set it to have a budget of
// their own.
var spinDir = ""

// spinEnv, set to 0 or 1, decides for the sandboxes the budget lets spin
// (rungv reads it; see Config).
const spinEnv = "GVX_SPIN"

// liveSandboxes counts this process's rungv children that have started and
// not yet exited; the budget falls back to it as the budget when the slot
// directory cannot be used.
var liveSandboxes atomic.Int64

// spinFits reports whether a sandbox may spin when it makes live sandboxes
// in all on cpus CPUs (see Config).
func spinFits(live int64, cpus int) bool { return live <= 2*int64(cpus) }

// usableCPUs returns how many CPUs this process may run on now.
func usableCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil || set.Count() == 0 {
		return 1
	}
	return set.Count()
}

// takeSpinSlot decides whether a sandbox whose Spin is unset may spin: it
// may when it gets one of the host's spin slots. release gives the slot back
// (or the place in this process's count), once, when the sandbox has exited.
func takeSpinSlot() (release func(), spin bool) {
	if os.Getenv(spinEnv) == "0" {
		return func() {}, false // rungv would not spin; a slot would be wasted
	}
	cpus := usableCPUs()
	if hostBusy(cpus) {
		return func() {}, false
	}
	dir, err := spinSlotDir()
	if err != nil {
		live := liveSandboxes.Add(1)
		return func() { liveSandboxes.Add(-1) }, spinFits(live, cpus)
	}
	for i := 0; i < 2*cpus; i++ {
		fd, err := unix.Open(filepath.Join(dir, fmt.Sprintf("slot-%d", i)), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			continue
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			return func() { unix.Close(fd) }, true
		}
		unix.Close(fd)
	}
	return func() {}, false
}

// runnableThreads returns how many threads on the host are running or
// waiting for a CPU now, this one included (procs_running in /proc/stat),
// or -1 if it cannot tell. Tests replace it.
var runnableThreads = func() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "procs_running "); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return -1
}

// hostBusy reports whether the host's CPUs are oversubscribed: whether,
// besides the caller, at least twice as many threads as cpus are running
// or waiting to. A reading under the line answers at once, so a start on a
// quiet host pays one read; one over it is checked with two more a few
// hundred µs apart and the middle one counts, so that passing kernel
// threads do not decide. Twice, not once: a sandbox that starts while
// another shuts down sees a few threads runnable for a moment, while a
// node busy with more sandboxes than CPUs keeps about five per CPU
// runnable (benchmarks/README, "Work per core"). A spinning sandbox gains
// only with a CPU to spare; on a busy host its spinning threads take CPU
// the others need, and since the choice holds for the sandbox's life, a
// fleet's first sandboxes would spin through every later one's work.
func hostBusy(cpus int) bool {
	busy := func(runnable int) bool { return runnable-1 >= 2*cpus }
	reads := [3]int{runnableThreads()}
	if !busy(reads[0]) {
		return false
	}
	for i := 1; i < len(reads); i++ {
		time.Sleep(300 * time.Microsecond)
		reads[i] = runnableThreads()
	}
	slices.Sort(reads[:])
	return busy(reads[1])
}

// spinSlotDir returns the directory of the host's spin slots, made if
// missing. It refuses one that is not a directory of this user's that only
// this user may write (and, by default, one whose parent is not), so that
// no other user can take or fake the slots.
func spinSlotDir() (string, error) {
	dirs := []string{spinDir}
	if spinDir == "" {
		parent := filepath.Join(os.TempDir(), fmt.Sprintf("gvx-%d", os.Getuid()))
		dirs = []string{filepath.Join(parent, "spin"), parent}
	}
	if err := os.MkdirAll(dirs[0], 0o700); err != nil {
		return "", err
	}
	for _, d := range dirs {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return "", err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o022 != 0 {
			return "", fmt.Errorf("%s is not a directory that only uid %d may write", d, os.Getuid())
		}
	}
	return dirs[0], nil
}
