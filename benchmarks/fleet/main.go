// Command fleet measures many sandboxes on one machine, as an RL trainer
// runs them: boot N sandboxes, then give each its first command with C
// commands in flight at once, then a second round. It reports boot and exec
// latencies (p50, p99, max), throughput, and how many execs took longer
// than -stall — a first exec that needs a new systrap stub process can
// stall for seconds when many sandboxes create stubs at once, which
// rungv avoids by preparing its stubs at boot.
//
//	go run ./benchmarks/fleet -rungv build/rungv -image REF [-n 128] [-c 16] [-runs 5] [-pin]
//
// Figures go to stdout as markdown; nothing here is a test.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"z.gfire.dev/gvx/benchmarks/internal/benchfmt"
	"z.gfire.dev/gvx/core/gvx"
)

var (
	rungv   = flag.String("rungv", "build/rungv", "rungv binary")
	image   = flag.String("image", "", "gvx image reference (cached or pullable)")
	n       = flag.Int("n", 128, "sandboxes alive at once")
	c       = flag.Int("c", 16, "commands in flight at once")
	booters = flag.Int("boot", 32, "sandboxes booting at once")
	runs    = flag.Int("runs", 5, "fleets booted, one after another")
	stall   = flag.Duration("stall", 5*time.Second, "an exec slower than this counts as a stall")
	pin     = flag.Bool("pin", false, "pin sandbox i to the i-th CPU this process may use, round robin (Resources.CPUSet)")
)

// cpus are the CPUs that -pin spreads the sandboxes over.
var cpus []int

// cmdArgv is the command every sandbox runs, twice.
var cmdArgv = []string{"echo", "hi"}

func main() {
	flag.Parse()
	if *image == "" {
		fmt.Fprintln(os.Stderr, "fleet: -image is required")
		os.Exit(2)
	}
	if abs, err := filepath.Abs(*rungv); err == nil {
		*rungv = abs
	}
	pinned := "not pinned"
	if *pin {
		if cpus = benchfmt.CPUs(); len(cpus) == 0 {
			fmt.Fprintln(os.Stderr, "fleet: -pin: cannot read this process's CPU affinity")
			os.Exit(1)
		}
		pinned = "each pinned to one CPU"
	}
	fmt.Printf("%d sandboxes (%s), %d booting at once, %d commands (`%s`) in flight; %d fleets; load average %s\n\n",
		*n, pinned, *booters, *c, cmdArgv[0], *runs, benchfmt.LoadAvg())
	fmt.Println("| fleet | boot p50 / max | first exec p50 / p99 / max | first execs/s | stalls > " + stall.String() + " | second exec p50 / max |")
	fmt.Println("|---|---|---|---|---|---|")
	for r := 1; r <= *runs; r++ {
		if err := fleet(r); err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			os.Exit(1)
		}
	}
}

func fleet(r int) error {
	ctx := context.Background()
	sbs := make([]*gvx.Sandbox, *n)
	defer func() {
		for _, sb := range sbs {
			if sb != nil {
				sb.Close()
			}
		}
	}()
	boot, err := each(*booters, func(i int) error {
		cfg := gvx.Config{OCIImage: *image, Rungv: *rungv, KeepAlive: true}
		if *pin {
			cfg.Resources.CPUSet = []int{cpus[i%len(cpus)]}
		}
		sb, err := gvx.New(ctx, cfg)
		sbs[i] = sb
		return err
	})
	if err != nil {
		return fmt.Errorf("booting: %w", err)
	}
	exec := func(i int) error {
		res, err := sbs[i].Exec(ctx, cmdArgv, nil)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 || string(res.Stdout) != "hi\n" {
			return fmt.Errorf("sandbox %d: `echo hi` exited %d with stdout %q", i, res.ExitCode, res.Stdout)
		}
		return nil
	}
	start := time.Now()
	first, err := each(*c, exec)
	if err != nil {
		return fmt.Errorf("first exec: %w", err)
	}
	rate := float64(*n) / time.Since(start).Seconds()
	second, err := each(*c, exec)
	if err != nil {
		return fmt.Errorf("second exec: %w", err)
	}
	stalls := 0
	for _, d := range first {
		if d > *stall {
			stalls++
		}
	}
	fmt.Printf("| %d | %s / %s | %s / %s / %s | %.0f | %d | %s / %s |\n", r,
		ms(benchfmt.Percentile(boot, 50)), ms(boot[len(boot)-1]),
		ms(benchfmt.Percentile(first, 50)), ms(benchfmt.Percentile(first, 99)), ms(first[len(first)-1]),
		rate, stalls,
		ms(benchfmt.Percentile(second, 50)), ms(second[len(second)-1]))
	return nil
}

// each runs f(0..n-1) with at most conc at once and returns the sorted
// durations of the calls.
func each(conc int, f func(i int) error) ([]time.Duration, error) {
	ds := make([]time.Duration, *n)
	work := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				start := time.Now()
				err := f(i)
				ds[i] = time.Since(start)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range *n {
		work <- i
	}
	close(work)
	wg.Wait()
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds, firstErr
}

func ms(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}
