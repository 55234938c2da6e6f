package sentry

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxHostCPU bounds the CPU numbers a CPUSet may name: the size of the
// affinity mask unix.CPUSet holds.
const maxHostCPU = len(unix.CPUSet{}) * 64

// pinToCPUs restricts every thread of this process to the host CPUs in
// cpus, and with them the platform's stub processes, which inherit the
// mask of the thread that forks them. It also lowers GOMAXPROCS to the
// number of CPUs, so that the Go runtime does not run more threads than
// it has CPUs to run them on.
//
// Why a sandbox wants it: a guest system call or page fault is a round
// trip between a stub thread and a Sentry thread. On one CPU the two hand
// over without waking another CPU, which on virtual machines costs an
// interprocessor interrupt per wake-up; pinned to one CPU, a sandbox's
// exec round trip was 15-20% shorter here (benchmarks/startup). Many
// sandboxes pinned to different CPUs also stop competing for each
// other's caches.
//
// Preconditions: cpus passed Config.CheckLimits (each is a CPU this
// process may run on); the platform has not started (no stub process
// exists).
func pinToCPUs(cpus []int) error {
	var want unix.CPUSet
	for _, c := range cpus {
		want.Set(c)
	}
	if err := setAffinityAllThreads(&want); err != nil {
		return fmt.Errorf("sentry: pinning this process's threads to CPUs %s: %w", FormatCPUSet(&want), err)
	}
	if n := want.Count(); n < runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
	}
	return nil
}

// FormatCPUSet writes s as a CPU list, as in "0-3,6", as --cpuset-cpus
// and /proc/PID/status (Cpus_allowed_list) write one.
func FormatCPUSet(s *unix.CPUSet) string {
	var parts []string
	for c := 0; c < maxHostCPU; c++ {
		if !s.IsSet(c) {
			continue
		}
		end := c
		for end+1 < maxHostCPU && s.IsSet(end+1) {
			end++
		}
		if end == c {
			parts = append(parts, strconv.Itoa(c))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", c, end))
		}
		c = end
	}
	if len(parts) == 0 {
		return "no CPU"
	}
	return strings.Join(parts, ",")
}
