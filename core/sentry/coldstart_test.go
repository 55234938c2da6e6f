package sentry

import (
	"bufio"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestColdStart measures what `rungv run IMAGE true` costs end to end: a
// fresh process that boots a locked-down sandbox, runs true and exits.
func TestColdStart(t *testing.T) {
	const runs = 20
	var total, inside []time.Duration
	for range runs {
		cmd := helperCmd(t, "coldstart")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		elapsed := time.Since(start)
		if err := cmd.Wait(); err != nil || !strings.HasPrefix(line, "done") {
			t.Fatalf("cold start: %v %q %q", err, line, stderr.String())
		}
		var newUS, totalUS int64
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				totalUS = atoi64(v)
			}
			if v, ok := strings.CutPrefix(f, "new="); ok {
				newUS = atoi64(v)
			}
		}
		_ = newUS
		total = append(total, elapsed)
		inside = append(inside, time.Duration(totalUS)*time.Microsecond)
	}
	sort.Slice(total, func(i, j int) bool { return total[i] < total[j] })
	sort.Slice(inside, func(i, j int) bool { return inside[i] < inside[j] })
	t.Logf("exec of the process to `true` done, %d runs: p50 %v, p90 %v; inside the process (New..exit): p50 %v", runs, total[runs/2], total[runs*9/10], inside[runs/2])
}

func atoi64(s string) int64 {
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
	}
	return n
}
