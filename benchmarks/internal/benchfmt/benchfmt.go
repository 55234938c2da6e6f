// Package benchfmt holds what the benchmark commands share when they report
// figures: percentiles of timings and the machine's load while they ran.
package benchfmt

import (
	"os"
	"slices"
	"strings"
	"time"
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
