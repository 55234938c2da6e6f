package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/benchmarks/internal/benchfmt"
	fleetpkg "z.gfire.dev/gvx/benchmarks/internal/fleet"
	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
	"z.gfire.dev/gvx/internal/battery"
)

// stallLimit is how long an `echo` may take before it counts as a stall;
// an unstalled one takes milliseconds, even with 128 sandboxes on 2 cores.
const stallLimit = 5 * time.Second

// A stall is reported when it begins and again every stallReport, at most
// stallReports times more.
const (
	stallReport  = 10 * time.Second
	stallReports = 6
)

// TestBatteryFleetStalls is the battery's stall count (issue 17): fleets of
// 128 sandboxes, 16 first commands in flight, as benchmarks/fleet runs
// them, alone and beside CPU-bound neighbours — 100 fleets of each in `make
// reliability`, one small fleet of each in `make test`.
// Every exec that takes longer than stallLimit is a stall and fails the
// test, with the sandbox's pid for a look at its threads.
func TestBatteryFleetStalls(t *testing.T) {
	fleets, n := battery.Count(1, 100), battery.Count(32, 128)
	dir := t.TempDir()
	rungvBin := filepath.Join(dir, "rungv")
	build := exec.Command("go", "build", "-o", rungvBin, "../../core/cmd/rungv")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building rungv: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "run", "../../core/internal/testimage/mkimage", "-default", filepath.Join(dir, "image")).Output()
	if err != nil {
		t.Fatalf("building the default image: %v", err)
	}
	var fleetStart atomic.Value // CPUTimes
	fleetStart.Store(benchfmt.ReadCPUTimes())
	// Every thread's scheduler counts, once a second, so that a stall can
	// say what ran on the host from just before its exec began.
	history := newSchedHistory(stallLimit + 2*time.Second)
	stopSampling := make(chan struct{})
	defer close(stopSampling)
	go history.sample(time.Second, stopSampling)
	cfg := fleetpkg.Config{
		Sandbox:  gvx.Config{Sandbox: spec.Sandbox{Image: strings.TrimSpace(string(out)), KeepAlive: true}, Rungv: rungvBin, Cache: filepath.Join(dir, "cache")},
		N:        n,
		Booters:  32,
		InFlight: 16,
		Stall:    stallLimit,
		// What the stalled sandbox's threads and stubs do, and how the
		// host's CPUs were spent since the fleet began, tell a lost wake-up
		// (sleeping stubs, CPUs idle) from starvation (runnable threads,
		// CPUs busy or stolen by the hypervisor).
		OnStall: func(sb *gvx.Sandbox, done <-chan struct{}) {
			report := func(took time.Duration) {
				tree := benchfmt.Tree(sb.PID())
				before, reading := history.oldest()
				t.Logf("an exec in rungv %d has taken %v so far (load average %s; CPUs since the fleet began: %s); its threads: %s; in the last %v %s (reading them took %v)",
					sb.PID(), took, benchfmt.LoadAvg(), benchfmt.ReadCPUTimes().Since(fleetStart.Load().(benchfmt.CPUTimes)),
					benchfmt.Threads(tree), time.Since(before.at).Round(time.Millisecond),
					benchfmt.SchedSince(before.stats, benchfmt.ReadSchedStats(), tree), reading)
			}
			report(stallLimit)
			// A stall that goes on is told again, every stallReport, so that
			// starvation that ends can be told from a wait that does not.
			tick := time.NewTicker(stallReport)
			defer tick.Stop()
			for took := stallLimit + stallReport; took <= stallLimit+stallReports*stallReport; took += stallReport {
				select {
				case <-done:
					return
				case <-tick.C:
					report(took)
				}
			}
		},
	}
	// Half the fleets run beside CPU-bound neighbours, one busy loop a CPU,
	// as a trainer's own workers or another tenant's jobs load a node: in
	// the test's session (as a trainer's worker processes are) for one
	// fleet, in sessions of their own for the next. Before each sandbox had
	// a session of its own, 2-5 fleets in 10 stalled beside them.
	cpus := runtime.NumCPU()
	var rows [len(stallKinds)]stallRow
	for f := 0; f < 2*fleets; f++ {
		kind := stallCycle[f%len(stallCycle)]
		var stop func()
		if kind != alone {
			stop = startNeighbours(t, cpus, kind == besideOwnSessions)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		fleetStart.Store(benchfmt.ReadCPUTimes())
		start := time.Now()
		res, err := fleetpkg.Run(ctx, cfg)
		cancel()
		if stop != nil {
			stop()
		}
		if err != nil {
			t.Fatalf("fleet %d (%s): %v", f+1, stallKinds[kind], err)
		}
		if res.Stalls > 0 {
			t.Errorf("fleet %d (%s): %d execs took longer than %v (slowest %v)", f+1, stallKinds[kind], res.Stalls, stallLimit, max(res.First[len(res.First)-1], res.Second[len(res.Second)-1]))
		}
		rows[kind].add(res, time.Since(start))
	}
	var table [][]string
	for kind, r := range rows {
		if r.fleets > 0 {
			table = append(table, r.cells(stallKinds[kind]))
		}
	}
	battery.Table(t, fmt.Sprintf("fleet stalls (%d sandboxes a fleet, 16 execs in flight, a stall is an exec over %v; neighbours: one busy loop per CPU, %d)", n, stallLimit, cpus),
		[]string{"beside", "fleets", "stalled fleets", "execs", "stalled execs", "first exec p50 (median of fleets)", "slowest first exec", "took"},
		table...)
}

// What a fleet runs beside, and the order the fleets take them in: every
// other fleet alone, the rest beside busy loops in either kind of session.
const (
	alone = iota
	besideTestSession
	besideOwnSessions
)

var (
	stallKinds = [...]string{alone: "nothing", besideTestSession: "busy loops in the test's session", besideOwnSessions: "busy loops in sessions of their own"}
	stallCycle = [...]int{alone, besideTestSession, alone, besideOwnSessions}
)

// stallRow adds up the fleets of one kind.
type stallRow struct {
	fleets, stalled, execs, stalls int
	firstP50, firstMax             []time.Duration
	took                           time.Duration
}

func (r *stallRow) add(res fleetpkg.Result, took time.Duration) {
	r.fleets++
	r.execs += len(res.First) + len(res.Second)
	r.stalls += res.Stalls
	if res.Stalls > 0 {
		r.stalled++
	}
	r.firstP50 = append(r.firstP50, benchfmt.Percentile(res.First, 50))
	r.firstMax = append(r.firstMax, res.First[len(res.First)-1])
	r.took += took
}

func (r *stallRow) cells(kind string) []string {
	return []string{kind, fmt.Sprint(r.fleets), fmt.Sprint(r.stalled), fmt.Sprint(r.execs), fmt.Sprint(r.stalls),
		fmt.Sprintf("%.0f ms", float64(benchfmt.Percentile(r.firstP50, 50))/1e6),
		fmt.Sprintf("%.0f ms", float64(benchfmt.Percentile(r.firstMax, 100))/1e6),
		r.took.Round(time.Second).String()}
}

// startNeighbours starts n CPU-bound shell loops, in sessions of their own
// if ownSessions, and returns a function that kills them and waits.
func startNeighbours(t *testing.T, n int, ownSessions bool) (stop func()) {
	t.Helper()
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: ownSessions, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			t.Fatalf("starting a busy loop: %v", err)
		}
		cmds = append(cmds, c)
	}
	return stop
}

// schedHistory keeps the host's scheduler counts of the last while.
type schedHistory struct {
	keep    time.Duration
	mu      sync.Mutex
	samples []schedSample
	took    time.Duration // how long the last reading took
}

type schedSample struct {
	at    time.Time
	stats map[int]benchfmt.SchedStat
}

func newSchedHistory(keep time.Duration) *schedHistory {
	h := &schedHistory{keep: keep}
	h.add()
	return h
}

func (h *schedHistory) add() {
	start := time.Now()
	s := schedSample{at: start, stats: benchfmt.ReadSchedStats()}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.took = time.Since(start)
	h.samples = append(h.samples, s)
	for len(h.samples) > 1 && start.Sub(h.samples[0].at) > h.keep {
		h.samples = h.samples[1:]
	}
}

// sample adds a reading every interval until stop is closed.
func (h *schedHistory) sample(interval time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			h.add()
		}
	}
}

// oldest returns the oldest reading kept, and how long a reading takes.
func (h *schedHistory) oldest() (schedSample, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.samples[0], h.took
}
