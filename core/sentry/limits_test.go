package sentry

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/eventually"
)

func TestPidsLimit(t *testing.T) {
	const limit = 20
	s := newSandbox(t, Config{PidsLimit: limit})
	startIdle(t, s)
	// The spawner forks sleeps one by one until a fork fails, which makes
	// busybox sh give up; the sleeps stay, children of init.
	r := execAndWait(t, s, sh(`for i in $(seq 40); do sleep 1000 >/dev/null 2>&1 & done; echo unreachable`))
	if r.status.ExitCode() == 0 || !strings.Contains(r.stderr, "can't fork") {
		t.Fatalf("spawner: %v %q %q", r.status, r.stdout, r.stderr)
	}
	// init + the sleeps: the spawner itself was task number limit.
	if n := s.k.TaskSet().Root.NumTasks(); n != limit-1 {
		t.Errorf("%d tasks left with a limit of %d, want %d", n, limit, limit-1)
	}
	// Exec from the host is not refused at the limit.
	r = execAndWait(t, s, ProcessSpec{Argv: []string{"echo", "host can still exec"}})
	if r.stdout != "host can still exec\n" {
		t.Errorf("exec at the limit: %v %q %q", r.status, r.stdout, r.stderr)
	}
}

func TestForkBomb(t *testing.T) {
	const limit = 64
	s := newSandbox(t, Config{PidsLimit: limit})
	startIdle(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The classic bomb; every fork beyond the limit fails with EAGAIN.
	var stderr syncBuffer
	spec := sh(`b() { b | b & }; b; sleep 1000`)
	spec.Stderr = &stderr
	bomb, err := s.Exec(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	// The tasks, sampled until the bomb meets the limit and has been seen
	// near it.
	maxTasks := 0
	eventually.Within(t, time.Minute, "the fork bomb to meet its limit", func() (bool, error) {
		maxTasks = max(maxTasks, s.k.TaskSet().Root.NumTasks())
		if maxTasks > limit {
			return false, eventually.Stop(fmt.Errorf("%d tasks with a limit of %d", maxTasks, limit))
		}
		met := strings.Contains(stderr.String(), "can't fork")
		return met && maxTasks >= limit/2, fmt.Errorf("peak %d tasks of %d, a fork failed: %v", maxTasks, limit, met)
	})
	t.Logf("fork bomb peaked at %d tasks (limit %d)", maxTasks, limit)

	// The host is fine and so is the sandbox: kill the bomb's process
	// tree and run something.
	r := execAndWait(t, s, sh(`kill -9 -1 2>/dev/null; true`))
	_ = r
	bomb.Wait()
}

// hostDescendants counts the host processes below this one: systrap's stub
// processes (one or more per guest address space) and anything else the
// test process started.
func hostDescendants(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	self, n := os.Getpid(), 0
	for pid := range parent {
		for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == self {
				n++
				break
			}
		}
	}
	return n
}

// TestForkBombStopsAtTheDefaultLimit: with no PidsLimit a fork bomb meets
// DefaultPidsLimit (its forks fail with EAGAIN), and the host processes it
// costs (stubs, which systrap keeps for reuse) stay within a small
// multiple of it instead of filling the host's process table.
func TestForkBombStopsAtTheDefaultLimit(t *testing.T) {
	s := newSandbox(t, Config{})
	if st, err := s.Stats(); err != nil || st.PidsLimit != DefaultPidsLimit {
		t.Fatalf("Stats of a Config without PidsLimit: %+v %v, want PidsLimit %d", st, err, DefaultPidsLimit)
	}
	startIdle(t, s)
	// Three host processes per guest task is well above what the stubs
	// take; without the limit the bomb passes it within seconds.
	bound := hostDescendants(t) + 3*DefaultPidsLimit
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr syncBuffer
	bomb, err := s.Exec(ctx, ProcessSpec{Argv: []string{"/bin/sh", "-c", `b() { b | b & }; b; sleep 1000`}, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		execAndWait(t, s, sh(`kill -9 -1 2>/dev/null; true`))
		bomb.Wait()
	}()
	eventually.Within(t, time.Minute, "a fork of the bomb to fail with EAGAIN", func() (bool, error) {
		if strings.Contains(stderr.String(), "can't fork: Resource temporarily unavailable") {
			return true, nil
		}
		if n := hostDescendants(t); n > bound {
			return false, eventually.Stop(fmt.Errorf("the fork bomb made %d host processes (bound %d) and met no limit; guest tasks: %d", n, bound, s.k.TaskSet().Root.NumTasks()))
		}
		return false, fmt.Errorf("guest tasks: %d", s.k.TaskSet().Root.NumTasks())
	})
	if n := s.k.TaskSet().Root.NumTasks(); n > DefaultPidsLimit {
		t.Errorf("%d guest tasks, above the default limit of %d", n, DefaultPidsLimit)
	}
	// Stubs still being made for forks admitted just before the limit
	// settle within a moment; none may pass the bound. No event marks the
	// end of that moment, so this watches a fixed window (a check that
	// something does not happen, not a wait).
	peak := 0
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		peak = max(peak, hostDescendants(t))
	}
	if peak > bound {
		t.Fatalf("%d host processes at the limit, above the bound of %d", peak, bound)
	}
	t.Logf("fork bomb at the default limit: %d guest tasks, %d host processes", s.k.TaskSet().Root.NumTasks(), peak)
}

func TestNoPidsLimit(t *testing.T) {
	s := newSandbox(t, Config{PidsLimit: NoPidsLimit})
	if st, err := s.Stats(); err != nil || st.PidsLimit != 0 {
		t.Fatalf("Stats with NoPidsLimit: %+v %v, want PidsLimit 0 (none)", st, err)
	}
}

func TestMemoryLimitKillsHog(t *testing.T) {
	const limit = 128 << 20
	s := newSandbox(t, Config{MemoryLimit: limit})
	startIdle(t, s)

	r := execAndWait(t, s, sh(`grep MemTotal /proc/meminfo`))
	if want := fmt.Sprintf("MemTotal:         %d kB", limit/1024); strings.TrimSpace(r.stdout) != want {
		t.Errorf("meminfo %q, want %q", r.stdout, want)
	}

	// awk doubles a string until it is killed; the memory is touched from
	// user space, page by page.
	start := time.Now()
	r = execAndWait(t, s, sh(`awk 'BEGIN { s = "x"; while (1) s = s s }'`))
	if r.status.Signal != syscall.SIGKILL || !r.status.OOMKilled {
		t.Fatalf("hog ended with %v (stderr %q), want SIGKILL by the OOM killer", r.status, r.stderr)
	}
	// The exec'd shell is reaped just after it is waited for.
	waitFor(t, "the hog's shell to be reaped", func() bool { st, _ := s.Stats(); return st.Tasks == 1 })
	st, err := s.Stats()
	if err != nil || st.OOMKills != 1 || st.MemoryLimit != limit || st.MemoryUsage == 0 {
		t.Errorf("Stats after the kill: %+v %v", st, err)
	}
	t.Logf("hog killed after %v; OOM kills: %d", time.Since(start), s.oom.kills.Load())
	if k := s.oom.kills.Load(); k != 1 {
		t.Errorf("%d OOM kills, want 1", k)
	}

	// The sandbox survives: init lives and new processes run.
	r = execAndWait(t, s, ProcessSpec{Argv: []string{"echo", "alive"}})
	if r.stdout != "alive\n" {
		t.Fatalf("after OOM: %v %q %q", r.status, r.stdout, r.stderr)
	}
	if st := s.Init(); st == nil {
		t.Fatal("no init")
	}
	select {
	case <-s.Init().Done():
		t.Fatal("init died with the hog")
	default:
	}
}

func TestMemoryLimitBoundsWritableLayer(t *testing.T) {
	const limit = 64 << 20
	s := newSandbox(t, Config{MemoryLimit: limit})
	p, err := s.Start(sh(`dd if=/dev/zero of=/big bs=1M count=100`))
	if err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	// Either the layer's size cap (ENOSPC: dd fails) or the OOM killer
	// (SIGKILL) stops dd, whichever the writes reach first; never more
	// than the limit lands. The size is read from the host side: with
	// the sandbox's memory full, a guest ls may be killed too.
	if st.ExitCode() == 0 {
		t.Fatalf("dd wrote 100 MiB under a 64 MiB limit: %v", st)
	}
	fi, err := s.Stat(context.Background(), "/big")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > limit {
		t.Fatalf("wrote %d bytes into / with a %d byte limit (dd: %v)", fi.Size(), limit, st)
	}
}

func TestMemoryCeilingBoundsOneSyscall(t *testing.T) {
	const limit = 64 << 20
	s := newSandbox(t, Config{MemoryLimit: limit})
	startIdle(t, s)
	var peak atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if u, err := s.k.MemoryFile().TotalUsage(); err == nil && u > peak.Load() {
				peak.Store(u)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	// One read(2) of 3 GiB from /dev/zero: the OOM killer cannot interrupt
	// it, the ceiling (1 GiB for this limit) must.
	r := execAndWait(t, s, sh(`dd if=/dev/zero of=/dev/null bs=3G count=1; echo "dd exit $?"`))
	close(stop)
	<-done
	if p := peak.Load(); p > 1<<30+64<<20 {
		t.Fatalf("memory use peaked at %d MiB, above the 1 GiB ceiling", p>>20)
	}
	if r.status.ExitCode() == 0 && strings.Contains(r.stdout, "dd exit 0") {
		t.Fatalf("dd read 3 GiB under a 64 MiB limit: %q %q", r.stdout, r.stderr)
	}
	t.Logf("peak %d MiB; dd: %v %q %q", peak.Load()>>20, r.status, r.stdout, strings.TrimSpace(r.stderr))
	if r := execAndWait(t, s, ProcessSpec{Argv: []string{"echo", "alive"}}); r.stdout != "alive\n" {
		t.Fatalf("after the ceiling: %v %q", r.status, r.stderr)
	}
}
