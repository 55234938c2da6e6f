package main

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBadValuesSayWhatToGive: every numeric flag of rungv run, given a
// value out of range (NaN, negative, huge, a CPU the host lacks, a socket
// path past sun_path), is refused at once with a message that names the
// flag, the value and what to give instead, before any sandbox exists.
func TestBadValuesSayWhatToGive(t *testing.T) {
	img := testImage(t)
	long := "unix:/tmp/" + strings.Repeat("x", 110) + ".sock"
	cases := []struct {
		flags []string
		want  string
	}{
		{[]string{"--cpus", "NaN"}, "--cpus NaN is not a number of CPUs"},
		{[]string{"--cpus", "Inf"}, "--cpus +Inf is not a number of CPUs"},
		{[]string{"--cpus", "-1"}, "--cpus -1 is not a number of CPUs; give a positive number"},
		{[]string{"--cpus", "30000"}, "--cpus 30000 is more than the 1024 CPUs"},
		{[]string{"--cpus", "100000"}, "give at most 1024"},
		{[]string{"--cpus", "1e300"}, "--cpus 1e+300 is more than the 1024 CPUs"},
		{[]string{"--memory", "99999999999999"}, "--memory 99999999999999 is more than the maximum of 1 TiB"},
		{[]string{"--memory", "1e30"}, `"1e30" is not a size`},
		{[]string{"--memory", "2t"}, "--memory 2t is more than the maximum of 1 TiB"},
		{[]string{"--memory", "nan"}, `"nan" is not a size`},
		{[]string{"--memory", "-1g"}, `"-1g" is not a size`},
		{[]string{"--memory", "1k"}, "--memory 1k is below the minimum of 16 MiB"},
		{[]string{"--pids-limit", "-2"}, "--pids-limit -2 is negative; give a count of tasks, or -1 for no limit"},
		{[]string{"--timeout", "-1s"}, "--timeout -1s is negative"},
		{[]string{"--stop-timeout", "-1s"}, "--stop-timeout -1s is negative"},
		{[]string{"--cpuset-cpus", "5000"}, `--cpuset-cpus 5000 names CPU 5000, which this process may not run on`},
		{[]string{"--cpuset-cpus", "0-99999"}, "which this process may not run on"},
		{[]string{"--cpuset-cpus", "3-1"}, "is not a CPU list"},
		{[]string{"-p", "99999:80"}, "want a port number 1-65535"},
		{[]string{"-p", "8080:0"}, "want a port number 1-65535"},
		{[]string{"-p", long + ":80"}, "more than the 107 a unix socket's address holds (sun_path); pick a shorter path"},
		{[]string{"--control", long}, "more than the 107 a unix socket's address holds (sun_path); pick a shorter path"},
		{[]string{"--network", "nat", "--allow-net", "10.0.0.0/8:70000"}, "must be 1-65535"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.flags, "="), func(t *testing.T) {
			// A deadline, not a timing assertion: the old code took 25 s
			// for --cpus 30000 and never finished --cpus 100000.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			args := append([]string{"--cache", sharedCache(t), "run", "-q"}, c.flags...)
			cmd := exec.CommandContext(ctx, rungvBinary, append(args, img, "true")...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("rungv run %s still running after 20 s; stderr %q", strings.Join(c.flags, " "), stderr.String())
			}
			if err == nil || !strings.Contains(stderr.String(), c.want) {
				t.Fatalf("rungv run %s: %v, stderr %q; want an error saying %q", strings.Join(c.flags, " "), err, stderr.String(), c.want)
			}
		})
	}
}
