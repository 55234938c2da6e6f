// Command execburst measures execs that reach one sandbox together, as a
// batched step or an agent's parallel tool calls send them: each round
// starts -concurrent execs of `true` at once in one sandbox and waits for
// all of them. It reports one exec's latency (p50, p90) and the round's
// wall time.
//
//	go run ./benchmarks/execburst -rungv build/rungv[,OTHER...] -image REF \
//	    [-concurrent 16] [-rounds 60]
//
// With several rungv binaries (an A/B of a change), one sandbox of each
// runs, and their rounds alternate (ABBA order), so that both see the
// same machine. The first binary is the anchor.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"z.gfire.dev/gvx/benchmarks/internal/benchfmt"
	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

var (
	rungvs     = flag.String("rungv", "build/rungv", "rungv binaries, comma-separated; the first is the anchor")
	image      = flag.String("image", "", "gvx image reference (cached or pullable)")
	cache      = flag.String("cache", "", "gvx image cache (default $GVX_CACHE)")
	concurrent = flag.Int("concurrent", 16, "execs started at once in one sandbox")
	rounds     = flag.Int("rounds", 60, "rounds per binary, after a warm-up round")
)

// sample is what one binary's rounds measured.
type sample struct {
	execs  []time.Duration
	rounds []time.Duration
}

func main() {
	flag.Parse()
	if *image == "" || *concurrent < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "execburst: -image is required; -concurrent and -rounds must be positive")
		os.Exit(2)
	}
	bins := strings.Split(*rungvs, ",")
	for i, b := range bins {
		if abs, err := filepath.Abs(b); err == nil {
			bins[i] = abs
		}
	}
	ctx := context.Background()
	sbs := make([]*gvx.Sandbox, len(bins))
	for i, b := range bins {
		sb, err := gvx.New(ctx, gvx.Config{Sandbox: spec.Sandbox{Image: *image, KeepAlive: true}, Rungv: b, Cache: *cache})
		if err != nil {
			fmt.Fprintf(os.Stderr, "execburst: starting a sandbox with %s: %v\n", b, err)
			os.Exit(1)
		}
		defer sb.Close()
		sbs[i] = sb
		// The warm-up round: the first execs pay for page faults and stubs.
		if _, err := round(ctx, sb); err != nil {
			fmt.Fprintf(os.Stderr, "execburst: %s: %v\n", b, err)
			os.Exit(1)
		}
	}
	fmt.Printf("%d execs of `true` at once in one sandbox, %d rounds per binary (interleaved); load average %s\n\n",
		*concurrent, *rounds, benchfmt.LoadAvg())
	samples := make([]sample, len(bins))
	for r := 0; r < *rounds; r++ {
		for j := range bins {
			i := j
			if r%2 == 1 {
				i = len(bins) - 1 - j
			}
			start := time.Now()
			execs, err := round(ctx, sbs[i])
			if err != nil {
				fmt.Fprintf(os.Stderr, "execburst: %s: %v\n", bins[i], err)
				os.Exit(1)
			}
			samples[i].rounds = append(samples[i].rounds, time.Since(start))
			samples[i].execs = append(samples[i].execs, execs...)
		}
	}
	fmt.Println("| rungv | one exec p50 / p90 | round wall p50 / p90 |")
	fmt.Println("|---|---|---|")
	for i, s := range samples {
		fmt.Printf("| %s | %s / %s | %s / %s |\n", bins[i],
			ms(benchfmt.Percentile(s.execs, 50)), ms(benchfmt.Percentile(s.execs, 90)),
			ms(benchfmt.Percentile(s.rounds, 50)), ms(benchfmt.Percentile(s.rounds, 90)))
	}
}

// round runs -concurrent execs of `true` in sb at once and returns each
// one's latency.
func round(ctx context.Context, sb *gvx.Sandbox) ([]time.Duration, error) {
	ds := make([]time.Duration, *concurrent)
	errs := make([]error, *concurrent)
	var wg sync.WaitGroup
	for i := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			res, err := sb.Exec(ctx, []string{"true"}, nil)
			ds[i] = time.Since(start)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("true exited with %d: %s", res.ExitCode, res.Stderr)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ds, nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
