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
// Figures go to stdout as markdown. The reliability battery counts the
// same fleets' stalls in stall_test.go (TestBatteryFleetStalls).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"z.gfire.dev/gvx/benchmarks/internal/benchfmt"
	fleetpkg "z.gfire.dev/gvx/benchmarks/internal/fleet"
	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

var (
	rungv   = flag.String("rungv", "build/rungv", "rungv binary")
	image   = flag.String("image", "", "gvx image reference (cached or pullable)")
	n       = flag.Int("n", 128, "sandboxes alive at once")
	c       = flag.Int("c", 16, "commands in flight at once")
	booters = flag.Int("boot", 32, "sandboxes booting at once")
	runs    = flag.Int("runs", 5, "fleets booted, one after another")
	stall   = flag.Duration("stall", 5*time.Second, "an exec slower than this counts as a stall")
	pin     = flag.Bool("pin", false, "pin sandbox i to the i-th CPU this process may use, round robin (spec.Sandbox.CPUSet)")
)

// cpus are the CPUs that -pin spreads the sandboxes over.
var cpus []int

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
		*n, pinned, *booters, *c, "echo", *runs, benchfmt.LoadAvg())
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
	cfg := fleetpkg.Config{
		Sandbox:  gvx.Config{Sandbox: spec.Sandbox{Image: *image, KeepAlive: true}, Rungv: *rungv},
		N:        *n,
		Booters:  *booters,
		InFlight: *c,
		Stall:    *stall,
	}
	for _, cpu := range cpus {
		cfg.CPUSets = append(cfg.CPUSets, []int{cpu})
	}
	res, err := fleetpkg.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
	boot, first, second := res.Boot, res.First, res.Second
	fmt.Printf("| %d | %s / %s | %s / %s / %s | %.0f | %d | %s / %s |\n", r,
		ms(benchfmt.Percentile(boot, 50)), ms(boot[len(boot)-1]),
		ms(benchfmt.Percentile(first, 50)), ms(benchfmt.Percentile(first, 99)), ms(first[len(first)-1]),
		float64(*n)/res.FirstElapsed.Seconds(), res.Stalls,
		ms(benchfmt.Percentile(second, 50)), ms(second[len(second)-1]))
	return nil
}

func ms(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}
