// Package benchfmt holds what the benchmark commands share when they report
// figures: percentiles of timings, the machine's load while they ran, and
// the CPUs they may pin sandboxes to.
package benchfmt

import (
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of ds,
// which it does not modify; 0 for no timings.
func Percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))]
}

// LoadAvg returns the 1, 5 and 15 minute load averages, so a table says
// whether the machine was quiet; "?" if they cannot be read.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// CPUs returns the CPUs this process may run on, in order; nil if its
// affinity cannot be read.
func CPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
