// Command startup measures gvx's sandbox start, exec round trip and idle
// memory side by side with the anchors on the same machine, in one run:
// runsc (built from the gVisor version gvx pins) and host `docker run`.
//
//	go run ./benchmarks/startup -rungv build/rungv -image oci:DIR:latest \
//	    [-runsc PATH] [-bundle DIR] [-docker-image NAME] [-n 50]
//
// Anchors that are not available (no runsc, no docker daemon) are reported
// as skipped with the reason.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"z.gfire.dev/gvx/benchmarks/internal/benchfmt"
	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

var (
	rungv       = flag.String("rungv", "build/rungv", "rungv binary")
	image       = flag.String("image", "", "gvx image reference (cached or pullable)")
	cache       = flag.String("cache", "", "gvx image cache (default $GVX_CACHE)")
	runsc       = flag.String("runsc", "", "runsc binary built from the pinned gVisor version (optional)")
	bundle      = flag.String("bundle", "", "OCI bundle directory for `runsc run` (optional; rootfs + config.json)")
	dockerImage = flag.String("docker-image", "", "image for host `docker run` (optional; must be loaded)")
	n           = flag.Int("n", 50, "runs per latency measurement")
	pssCounts   = flag.String("pss", "1,16,64", "sandbox counts for the idle PSS measurement")
	idleRounds  = flag.Int("idle-rounds", 12, "rounds of the exec-after-idle measurement (0 skips it)")
	forkLoops   = flag.Int("fork-loops", 300, "iterations of the in-guest fork+exec loop")
)

func main() {
	flag.Parse()
	// Commands run from the temporary directory: make paths absolute.
	for _, p := range []*string{rungv, runsc, bundle, cache} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err == nil {
				*p = abs
			}
		}
	}
	if *image == "" {
		fmt.Fprintln(os.Stderr, "startup: -image is required")
		os.Exit(2)
	}
	fmt.Printf("%d runs each; %d CPUs; load average %s\n\n", *n, numCPU(), benchfmt.LoadAvg())
	fmt.Println("## Cold start → first command done (`true`)")
	fmt.Println()
	fmt.Println("| what | p50 | p99 | min |")
	fmt.Println("|---|---|---|---|")
	row("gvx: `rungv run IMAGE true` (process start to exit)", measure(func() error {
		return run(nil, *rungv, cacheArgs("run", "--quiet", *image, "true")...)
	}))
	row("gvx SDK: `gvx.New` + `Exec(true)`", measureSDK())
	if *runsc != "" {
		row("`runsc do /bin/true` (root, systrap)", measure(func() error {
			return run(nil, *runsc, "--network=none", "do", "/bin/true")
		}))
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		row("`runsc --rootless do /bin/true` (uid 65534)", measure(func() error {
			return run(nobody, *runsc, "--rootless", "--network=none", "do", "/bin/true")
		}))
	} else {
		skip("runsc do", "no -runsc given")
	}
	if d := dockerAvailable(); d == "" {
		row("host `docker run --rm --network none IMAGE true`", measure(func() error {
			return run(nil, "docker", "run", "--rm", "--pull", "never", "--network", "none", *dockerImage, "true")
		}))
	} else {
		skip("docker run", d)
	}

	fmt.Println()
	fmt.Println("## Exec round trip (`true` in a running sandbox)")
	fmt.Println()
	fmt.Println("| what | p50 | p99 | min |")
	fmt.Println("|---|---|---|---|")
	row("gvx SDK `Exec(true)`", inSandbox(sdkConfig(), measureExecOf("true")))
	if cpus := benchfmt.CPUs(); len(cpus) > 1 {
		cpu := cpus[len(cpus)-1]
		pinned := sdkConfig()
		pinned.CPUSet = []int{cpu}
		row(fmt.Sprintf("gvx SDK `Exec(true)`, sandbox pinned to CPU %d (`--cpuset-cpus`)", cpu), inSandbox(pinned, measureExecOf("true")))
	} else {
		skip("gvx pinned to one CPU", "this process may run on one CPU only")
	}
	if *idleRounds > 0 {
		trimmed, kept := measureExecAfterIdle()
		row(fmt.Sprintf("gvx SDK `Exec(true)` after %v idle, binary trimmed (`GVX_IDLE_TRIM=1s`)", idlePause), trimmed)
		row(fmt.Sprintf("gvx SDK `Exec(true)` after %v idle, not trimmed (`GVX_IDLE_TRIM=0`)", idlePause), kept)
	} else {
		skip("gvx SDK `Exec(true)` after idle", "-idle-rounds 0")
	}
	if *runsc != "" && *bundle != "" {
		row("`runsc exec ID true`", inRunscContainer(measureExecOf("/bin/true")))
	} else {
		skip("runsc exec", "needs -runsc and -bundle")
	}
	if d := dockerAvailable(); d == "" {
		row("`docker exec ID true`", inDockerContainer(measureExecOf("true")))
	} else {
		skip("docker exec", d)
	}

	fmt.Println()
	fmt.Printf("## Process creation inside a sandbox (`sh -c 'for i in $(seq %d); do /bin/true; done'`, per iteration)\n", *forkLoops)
	fmt.Println()
	fmt.Println("What a shell script or a build pays per command: fork, exec, exit and wait, all inside the guest. Each figure is (time of the loop − time of an empty loop) / iterations, over 5 runs.")
	fmt.Println()
	fmt.Println("| what | p50 | p99 | min |")
	fmt.Println("|---|---|---|---|")
	row("gvx, systrap (the default)", inSandbox(sdkConfig(), measureForkLoop))
	ptraceCfg := sdkConfig()
	ptraceCfg.Platform = spec.PlatformPtrace
	row("gvx, `--platform ptrace`", inSandbox(ptraceCfg, measureForkLoop))
	if *runsc != "" && *bundle != "" {
		row("`runsc exec ID sh -c …` (systrap)", inRunscContainer(measureForkLoop))
	} else {
		skip("runsc exec", "needs -runsc and -bundle")
	}
	if d := dockerAvailable(); d == "" {
		row("`docker exec ID sh -c …` (no sandbox)", inDockerContainer(measureForkLoop))
	} else {
		skip("docker exec", d)
	}

	fmt.Println()
	fmt.Printf("## Busy sandboxes at once (`dd bs=1 count=%d` in each, all started together; wall time until the last ends)\n", busyBytes)
	fmt.Println()
	fmt.Println("systrap's threads can spin while the guest and the Sentry wait for each other (`--spin`, `spec.Sandbox.Spin`); by default a sandbox spins only while no more than twice as many sandboxes as the host has CPUs spin, in any process. Median of 3 interleaved rounds.")
	fmt.Println()
	fmt.Println("| sandboxes busy at once | spinning (`Spin: SpinOn`) | not spinning (`SpinOff`) |")
	fmt.Println("|---|---|---|")
	for _, k := range []int{1, 2, 4 * numCPU()} {
		on, off, err := measureBusy(k)
		if err != nil {
			fmt.Printf("| %d | error: %v | |\n", k, err)
			continue
		}
		fmt.Printf("| %d | %s | %s |\n", k, ms(on), ms(off))
	}

	fmt.Println()
	fmt.Println("## Idle memory (PSS per sandbox, all of its host processes)")
	fmt.Println()
	fmt.Println("rungv unmaps its own code and read-only data after 30 s without a control request (its default `--idle-trim`).")
	fmt.Println()
	fmt.Printf("| what | sandboxes | after %v idle | after %v idle (trimmed) |\n", shortSettle, trimmedSettle)
	fmt.Println("|---|---|---|---|")
	for _, f := range strings.Split(*pssCounts, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k <= 0 {
			if f != "" {
				fmt.Printf("| gvx (KeepAlive sandbox) | %q | skipped: not a positive count | |\n", f)
			}
			continue
		}
		short, trimmed, err := idlePSS(k)
		if err != nil {
			fmt.Printf("| gvx (KeepAlive sandbox) | %d | error: %v | |\n", k, err)
			continue
		}
		fmt.Printf("| gvx (KeepAlive sandbox) | %d | %s | %s |\n", k, mib(short), mib(trimmed))
	}
	if *runsc != "" && *bundle != "" {
		pss, err := runscPSS()
		if err != nil {
			fmt.Printf("| `runsc run` sandbox + gofer | 1 | error: %v | |\n", err)
		} else {
			fmt.Printf("| `runsc run` sandbox + gofer | 1 | %s | |\n", mib(pss))
		}
	}
}

func cacheArgs(args ...string) []string {
	if *cache != "" {
		return append([]string{"--cache", *cache}, args...)
	}
	return args
}

type stats struct {
	p50, p99, min time.Duration
	err           error
}

func measure(once func() error) stats {
	once() // warm the page cache
	var ds []time.Duration
	for i := 0; i < *n; i++ {
		start := time.Now()
		if err := once(); err != nil {
			return stats{err: err}
		}
		ds = append(ds, time.Since(start))
	}
	return summarize(ds)
}

func summarize(ds []time.Duration) stats {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	p99 := ds[len(ds)-1]
	if len(ds) >= 100 {
		p99 = ds[len(ds)*99/100]
	}
	return stats{p50: ds[len(ds)/2], p99: p99, min: ds[0]}
}

func row(name string, s stats) {
	if s.err != nil {
		fmt.Printf("| %s | error: %v | | |\n", name, s.err)
		return
	}
	fmt.Printf("| %s | %s | %s | %s |\n", name, ms(s.p50), ms(s.p99), ms(s.min))
}

func skip(name, why string) { fmt.Printf("| %s | skipped: %s | | |\n", name, why) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func run(cred *syscall.Credential, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = os.TempDir()
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

func sdkConfig() gvx.Config {
	return gvx.Config{Sandbox: spec.Sandbox{Image: *image, KeepAlive: true}, Rungv: *rungv, Cache: *cache}
}

func measureSDK() stats {
	ctx := context.Background()
	var ds []time.Duration
	for i := 0; i <= *n; i++ {
		start := time.Now()
		sb, err := gvx.New(ctx, sdkConfig())
		if err != nil {
			return stats{err: err}
		}
		_, err = sb.Exec(ctx, []string{"true"}, nil)
		d := time.Since(start)
		sb.Close()
		if err != nil {
			return stats{err: err}
		}
		if i > 0 {
			ds = append(ds, d)
		}
	}
	return summarize(ds)
}

// idlePause is how long a sandbox idles before each exec of
// measureExecAfterIdle: longer than the 1 s --idle-trim it sets.
const idlePause = 1500 * time.Millisecond

// measureExecAfterIdle measures the first exec after a pause, in a sandbox
// that trims rungv's binary mappings when idle and in one that does not,
// interleaved so that both see the same CPU speed.
func measureExecAfterIdle() (trimmed, kept stats) {
	ctx := context.Background()
	var sbs [2]*gvx.Sandbox
	for i, trim := range []string{"1s", "0"} {
		var err error
		withEnv("GVX_IDLE_TRIM", trim, func() { sbs[i], err = gvx.New(ctx, sdkConfig()) })
		if err != nil {
			return stats{err: err}, stats{err: err}
		}
		defer sbs[i].Close()
	}
	var ds [2][]time.Duration
	for round := 0; round < *idleRounds; round++ {
		time.Sleep(idlePause)
		for i, sb := range sbs {
			start := time.Now()
			if _, err := sb.Exec(ctx, []string{"true"}, nil); err != nil {
				return stats{err: err}, stats{err: err}
			}
			ds[i] = append(ds[i], time.Since(start))
		}
	}
	return summarize(ds[0]), summarize(ds[1])
}

// withEnv runs f with the environment variable key set to value; the SDK's
// rungv children inherit it.
func withEnv(key, value string, f func()) {
	old, had := os.LookupEnv(key)
	os.Setenv(key, value)
	defer func() {
		if had {
			os.Setenv(key, old)
		} else {
			os.Unsetenv(key)
		}
	}()
	f()
}

func dockerAvailable() string {
	if *dockerImage == "" {
		return "no -docker-image given"
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		return "no docker daemon"
	}
	return ""
}

// execIn runs a command in a sandbox or container and fails unless it
// exits with status 0.
type execIn func(argv ...string) error

// measureExecOf measures the round trip of exec'ing argv.
func measureExecOf(argv ...string) func(execIn) stats {
	return func(exec execIn) stats { return measure(func() error { return exec(argv...) }) }
}

// inSandbox runs m against a KeepAlive sandbox started from cfg, through
// the SDK's Exec.
func inSandbox(cfg gvx.Config, m func(execIn) stats) stats {
	ctx := context.Background()
	sb, err := gvx.New(ctx, cfg)
	if err != nil {
		return stats{err: err}
	}
	defer sb.Close()
	return m(func(argv ...string) error {
		res, err := sb.Exec(ctx, argv, nil)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%v exited with %d: %s", argv, res.ExitCode, res.Stderr)
		}
		return err
	})
}

// inDockerContainer runs m against a detached host container of
// -docker-image, through `docker exec`.
func inDockerContainer(m func(execIn) stats) stats {
	out, err := exec.Command("docker", "run", "-d", "--rm", "--pull", "never", "--network", "none", *dockerImage, "sleep", "3600").Output()
	if err != nil {
		return stats{err: err}
	}
	id := strings.TrimSpace(string(out))
	defer exec.Command("docker", "rm", "-f", id).Run()
	return m(func(argv ...string) error { return run(nil, "docker", append([]string{"exec", id}, argv...)...) })
}

// runscContainers numbers the containers of inRunscContainer.
var runscContainers atomic.Int32

// inRunscContainer runs m against a detached `runsc run` container of
// -bundle, through `runsc exec`.
func inRunscContainer(m func(execIn) stats) stats {
	id := fmt.Sprintf("gvx-bench-%d-%d", os.Getpid(), runscContainers.Add(1))
	root := filepath.Join(os.TempDir(), id+"-state")
	defer os.RemoveAll(root)
	if err := startRunsc(root, id); err != nil {
		return stats{err: err}
	}
	defer stopRunsc(root, id)
	return m(func(argv ...string) error {
		return run(nil, *runsc, append([]string{"--root", root, "exec", id}, argv...)...)
	})
}

func startRunsc(root, id string) error {
	// The detached container keeps its stdio: give it a file, not a pipe
	// that would never reach EOF.
	log, err := os.CreateTemp("", "runsc-run-*.log")
	if err != nil {
		return err
	}
	defer os.Remove(log.Name())
	defer log.Close()
	cmd := exec.Command(*runsc, "--root", root, "--network=none", "run", "--detach", "--bundle", *bundle, id)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		return fmt.Errorf("runsc run: %v: %s", err, out)
	}
	return nil
}

func stopRunsc(root, id string) {
	exec.Command(*runsc, "--root", root, "kill", id, "KILL").Run()
	time.Sleep(200 * time.Millisecond)
	exec.Command(*runsc, "--root", root, "delete", "--force", id).Run()
}

// shortSettle and trimmedSettle are how long idlePSS lets sandboxes idle
// before it reads their PSS: the first is well inside rungv's default
// --idle-trim of 30 s, the second past it.
const (
	shortSettle   = 2 * time.Second
	trimmedSettle = 35 * time.Second
)

// idlePSS starts k KeepAlive sandboxes and returns the mean PSS of a
// sandbox's host processes (rungv and its platform stubs) after they idled
// for shortSettle and for trimmedSettle.
func idlePSS(k int) (short, trimmed int64, err error) {
	ctx := context.Background()
	var sbs []*gvx.Sandbox
	defer func() {
		for _, sb := range sbs {
			sb.Close()
		}
	}()
	for i := 0; i < k; i++ {
		sb, err := gvx.New(ctx, sdkConfig())
		if err != nil {
			return 0, 0, err
		}
		if _, err := sb.Exec(ctx, []string{"true"}, nil); err != nil {
			return 0, 0, err
		}
		sbs = append(sbs, sb)
	}
	mean := func() int64 {
		var total int64
		for _, sb := range sbs {
			for _, pid := range descendants(sb.PID()) {
				total += pss(pid)
			}
		}
		return total / int64(k)
	}
	start := time.Now()
	time.Sleep(shortSettle)
	short = mean()
	time.Sleep(trimmedSettle - time.Since(start))
	return short, mean(), nil
}

func runscPSS() (int64, error) {
	id := fmt.Sprintf("gvx-bench-pss-%d", os.Getpid())
	root := filepath.Join(os.TempDir(), id+"-state")
	defer os.RemoveAll(root)
	before := allPIDs()
	if err := startRunsc(root, id); err != nil {
		return 0, err
	}
	defer stopRunsc(root, id)
	time.Sleep(2 * time.Second)
	var total int64
	for pid := range allPIDs() {
		if !before[pid] && strings.Contains(cmdline(pid), "runsc") {
			for _, p := range append([]int{pid}, descendants(pid)[1:]...) {
				total += pss(p)
			}
		}
	}
	return total, nil
}

func allPIDs() map[int]bool {
	out := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out[pid] = true
		}
	}
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// descendants returns pid and every process below it.
func descendants(pid int) []int {
	children := map[int][]int{}
	for p := range allPIDs() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// pss returns a process's proportional set size in bytes.
func pss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "Pss:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// forkLoopRuns is how many times measureForkLoop times each loop.
const forkLoopRuns = 5

// measureForkLoop times `for i in $(seq k); do /bin/true; done` through
// exec for k = -fork-loops and for k = 0, interleaved, and returns the
// difference per iteration: what fork, exec, exit and wait cost inside the
// guest, without the cost of starting the shell.
func measureForkLoop(exec execIn) stats {
	if *forkLoops <= 0 {
		return stats{err: fmt.Errorf("-fork-loops must be positive")}
	}
	loop := func(k int) (time.Duration, error) {
		start := time.Now()
		err := exec("/bin/sh", "-c", fmt.Sprintf("for i in $(seq %d); do /bin/true; done", k))
		return time.Since(start), err
	}
	if _, err := loop(1); err != nil { // warm the page cache
		return stats{err: err}
	}
	var ds []time.Duration
	for i := 0; i < forkLoopRuns; i++ {
		full, err := loop(*forkLoops)
		if err != nil {
			return stats{err: err}
		}
		empty, err := loop(0)
		if err != nil {
			return stats{err: err}
		}
		ds = append(ds, (full-empty)/time.Duration(*forkLoops))
	}
	return summarize(ds)
}

// busyBytes is how many one-byte reads and writes each busy sandbox makes.
const busyBytes = 20000

// measureBusy runs a system-call loop in k sandboxes at once, spinning and
// not, interleaved over 3 rounds, and returns the median wall times.
func measureBusy(k int) (on, off time.Duration, err error) {
	var ds [2][]time.Duration
	for round := 0; round < 3; round++ {
		for i, spin := range []bool{true, false} {
			d, err := busyOnce(k, spin)
			if err != nil {
				return 0, 0, err
			}
			ds[i] = append(ds[i], d)
		}
	}
	return summarize(ds[0]).p50, summarize(ds[1]).p50, nil
}

func busyOnce(k int, spin bool) (time.Duration, error) {
	ctx := context.Background()
	cfg := sdkConfig()
	cfg.Spin = &spin
	sbs := make([]*gvx.Sandbox, k)
	defer func() {
		for _, sb := range sbs {
			if sb != nil {
				sb.Close()
			}
		}
	}()
	for i := range sbs {
		sb, err := gvx.New(ctx, cfg)
		if err != nil {
			return 0, err
		}
		sbs[i] = sb
	}
	argv := []string{"dd", "if=/dev/zero", "of=/dev/null", "bs=1", fmt.Sprintf("count=%d", busyBytes)}
	errs := make(chan error, k)
	start := time.Now()
	for _, sb := range sbs {
		go func() {
			res, err := sb.Exec(ctx, argv, nil)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("dd exited with %d: %s", res.ExitCode, res.Stderr)
			}
			errs <- err
		}()
	}
	for range sbs {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
