// Package fleet runs many sandboxes on one machine as an RL trainer does:
// boot N, then give each its first command with C in flight at once, then a
// second round. The fleet benchmark reports its latencies; the reliability
// battery counts its stalls.
package fleet

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"z.gfire.dev/gvx/core/gvx"
)

// Config describes one fleet.
type Config struct {
	// Sandbox is the configuration every sandbox starts from.
	Sandbox gvx.Config
	// N sandboxes are alive at once; Booters boot at once; InFlight
	// commands run at once.
	N, Booters, InFlight int
	// CPUSets, if not empty, pins sandbox i to CPUSets[i%len(CPUSets)].
	CPUSets [][]int
	// Stall is how long an exec may take before it counts as a stall.
	Stall time.Duration
	// OnStall, if set, is called (on its own goroutine) when an exec has
	// taken Stall and not yet returned, with that sandbox and a channel
	// closed when the exec returns.
	OnStall func(sb *gvx.Sandbox, done <-chan struct{})
}

// Result holds one fleet's timings, each sorted.
type Result struct {
	Boot, First, Second []time.Duration
	// FirstElapsed is the first round's wall time.
	FirstElapsed time.Duration
	// Stalls counts the execs of both rounds that took longer than
	// Config.Stall.
	Stalls int
}

// argv is the command every sandbox runs, twice.
var argv = []string{"echo", "hi"}

// Run boots a fleet, runs both rounds and closes every sandbox.
func Run(ctx context.Context, cfg Config) (Result, error) {
	sbs := make([]*gvx.Sandbox, cfg.N)
	defer func() {
		for _, sb := range sbs {
			if sb != nil {
				sb.Close()
			}
		}
	}()
	var res Result
	var err error
	res.Boot, err = each(cfg.N, cfg.Booters, func(i int) error {
		sc := cfg.Sandbox
		if len(cfg.CPUSets) > 0 {
			sc.CPUSet = cfg.CPUSets[i%len(cfg.CPUSets)]
		}
		sb, err := gvx.New(ctx, sc)
		sbs[i] = sb
		return err
	})
	if err != nil {
		return res, fmt.Errorf("booting: %w", err)
	}
	exec := func(i int) error {
		if cfg.OnStall != nil {
			done := make(chan struct{})
			t := time.AfterFunc(cfg.Stall, func() { cfg.OnStall(sbs[i], done) })
			defer func() {
				t.Stop()
				close(done)
			}()
		}
		r, err := sbs[i].Exec(ctx, argv, nil)
		if err != nil {
			return fmt.Errorf("sandbox %d: %w", i, err)
		}
		if r.ExitCode != 0 || string(r.Stdout) != "hi\n" {
			return fmt.Errorf("sandbox %d: `echo hi` exited %d with stdout %q", i, r.ExitCode, r.Stdout)
		}
		return nil
	}
	start := time.Now()
	if res.First, err = each(cfg.N, cfg.InFlight, exec); err != nil {
		return res, fmt.Errorf("first exec: %w", err)
	}
	res.FirstElapsed = time.Since(start)
	if res.Second, err = each(cfg.N, cfg.InFlight, exec); err != nil {
		return res, fmt.Errorf("second exec: %w", err)
	}
	for _, d := range slices.Concat(res.First, res.Second) {
		if d > cfg.Stall {
			res.Stalls++
		}
	}
	return res, nil
}

// each runs f(0..n-1) with at most conc at once and returns the sorted
// durations of the calls and the first error.
func each(n, conc int, f func(i int) error) ([]time.Duration, error) {
	ds := make([]time.Duration, n)
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
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	slices.Sort(ds)
	return ds, firstErr
}
