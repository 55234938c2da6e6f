package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/sentry"
	"z.gfire.dev/gvx/core/spec"
	"z.gfire.dev/gvx/core/store"
)

// These tests run sandboxes with Run in the test process, on the test
// image, without the host lockdown (the process must go on afterwards).

// erofsPath is the test image's root file system, pulled once.
var erofsPath string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	b, err := testimage.Build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the test image:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "gvx-host-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	s, err := store.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	img, err := s.Pull(context.Background(), b.LayoutRef(), store.PullOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulling the test image:", err)
		return 1
	}
	erofsPath = img.ErofsPath()
	return m.Run()
}

// testPlan returns a Plan for the test image that runs argv as init.
func testPlan(t *testing.T, argv ...string) Plan {
	t.Helper()
	img, err := os.Open(erofsPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	return Plan{
		Config: sentry.Config{Image: img, Platform: sentry.PlatformSystrap, DisableLockdown: true},
		Init:   sentry.ProcessSpec{Argv: argv, Env: []string{"PATH=/bin:/usr/bin"}},
	}
}

// testHooks log to t and count the hooks called.
type testHooks struct {
	t              *testing.T
	ready, timeout atomic.Int32
}

func (h *testHooks) hooks() Hooks {
	return Hooks{
		Logf:     func(format string, args ...any) { h.t.Logf("host: "+format, args...) },
		Ready:    func() { h.ready.Add(1) },
		TimedOut: func() { h.timeout.Add(1) },
	}
}

// syncBuffer is a bytes.Buffer that init's output relay may write while
// the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRunToExitStatus runs a command to its end: it runs as the user the
// guest's /etc/passwd names, with that user's HOME, and Run returns its
// exit status.
func TestRunToExitStatus(t *testing.T) {
	p := testPlan(t, "/bin/sh", "-c", `id -u; id -g; echo "$HOME"; exit 3`)
	var out syncBuffer
	p.Init.Stdout = &out
	p.Defaults.User = "nobody"
	h := &testHooks{t: t}
	exit, err := Run(context.Background(), p, h.hooks())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if exit.Status.ExitCode() != 3 || exit.Err != nil || exit.CloseErr != nil || exit.Checkpointed {
		t.Errorf("Run = %+v, want exit status 3 and no errors", exit)
	}
	if got, want := out.String(), "65534\n65534\n/nonexistent\n"; got != want {
		t.Errorf("init printed %q, want %q (nobody's IDs and HOME, from /etc/passwd)", got, want)
	}
	if n := h.ready.Load(); n != 1 {
		t.Errorf("Ready was called %d times, want once", n)
	}
}

// TestRunStepErrors checks that a failure before init runs says which
// step failed, with the Sentry's error for the caller to restate.
func TestRunStepErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		plan func(*Plan)
		step Step
	}{
		{"missing command", func(p *Plan) { p.Init.Argv = []string{"/no/such/command"} }, StepStart},
		{"unknown user", func(p *Plan) { p.Defaults.User = "no-such-user" }, StepUser},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testPlan(t, "true")
			c.plan(&p)
			h := &testHooks{t: t}
			_, err := Run(context.Background(), p, h.hooks())
			var se *StepError
			if !errors.As(err, &se) || se.Step != c.step {
				t.Fatalf("Run: %v, want a *StepError of step %q", err, c.step)
			}
			if h.ready.Load() != 0 {
				t.Errorf("Ready was called for a sandbox that never ran")
			}
		})
	}
	p := testPlan(t, "/no/such/command")
	_, err := Run(context.Background(), p, Hooks{Logf: t.Logf})
	if f, ok := StartFailureOf("/no/such/command", err); !ok || f.Code != 127 {
		t.Errorf("StartFailureOf(%v) = %+v, %v; want exit status 127", err, f, ok)
	}
}

// TestRunStopsAtItsTimeout checks that a sandbox that outlives its
// timeout is stopped, init killed after the grace period if SIGTERM does
// not end it (a shell as PID 1 ignores it).
func TestRunStopsAtItsTimeout(t *testing.T) {
	p := testPlan(t, "/bin/sh", "-c", "sleep 1000")
	p.Timeout = 100 * time.Millisecond
	h := &testHooks{t: t}
	start := time.Now()
	if _, err := Run(context.Background(), p, h.hooks()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("Run took %v, want it stopped at its timeout", took)
	}
	if n := h.timeout.Load(); n != 1 {
		t.Errorf("TimedOut was called %d times, want once", n)
	}
}

// TestRunServesUntilShutdown runs a keep-alive sandbox that serves the
// control protocol on a listener: a client's exec runs, its Info says
// where the sandbox runs, and its Shutdown ends Run.
func TestRunServesUntilShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := testPlan(t)
	p.KeepAlive = true
	p.Info = control.SandboxInfo{ID: "test"}
	c, done := serveInBackground(t, ctx, p)
	if info := c.Info(); info.ID != "test" || info.PID != os.Getpid() || info.Platform != string(sentry.PlatformSystrap) {
		t.Errorf("Info = %+v, want ID test, this process's PID and the systrap platform", info)
	}
	if got := execOutput(t, ctx, c, "echo", "hello"); got != "hello\n" {
		t.Errorf("echo hello printed %q", got)
	}
	if err := c.Shutdown(ctx, 0); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.exit.Checkpointed {
			t.Errorf("Run after Shutdown = %+v, %v; want an exit", r.exit, r.err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after Shutdown")
	}
}

// serveInBackground runs p, a sandbox serving on a fresh unix socket, in
// the background, and returns a client of it and the channel Run's
// result arrives on.
func serveInBackground(t *testing.T, ctx context.Context, p Plan) (*control.Client, <-chan runResult) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	p.Control = Control{Listener: l}
	h := &testHooks{t: t}
	done := make(chan runResult, 1)
	go func() {
		exit, err := Run(context.Background(), p, h.hooks())
		done <- runResult{exit, err}
	}()
	c, err := control.Dial(ctx, sock)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, done
}

// runResult is what Run returned.
type runResult struct {
	exit Exit
	err  error
}

// execOutput runs argv in the sandbox and returns its output.
func execOutput(t *testing.T, ctx context.Context, c *control.Client, argv ...string) string {
	t.Helper()
	var out bytes.Buffer
	res, err := c.Exec(ctx, control.ExecRequest{Exec: spec.Exec{Argv: argv}}, control.ExecIO{Stdout: &out, InMemory: true})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec(%q) = %+v, %v; want exit 0", argv, res, err)
	}
	return out.String()
}

// TestRunCheckpointsAndRestores checkpoints a sandbox with Stop, which
// ends Run as checkpointed, and continues the snapshot with another Run:
// what the first sandbox wrote is there.
func TestRunCheckpointsAndRestores(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := testPlan(t)
	p.KeepAlive = true
	c, done := serveInBackground(t, ctx, p)
	execOutput(t, ctx, c, "sh", "-c", "echo before > /tmp/mark")
	snap, err := os.Create(filepath.Join(t.TempDir(), "box.snap"))
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if _, err := c.Checkpoint(ctx, control.CheckpointRequest{Stop: true}, snap); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil || !r.exit.Checkpointed {
			t.Fatalf("Run after a checkpoint with Stop = %+v, %v; want it checkpointed", r.exit, r.err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after a checkpoint with Stop")
	}

	if _, err := snap.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	p = testPlan(t)
	p.Snapshot = snap
	c, done = serveInBackground(t, ctx, p)
	if got := execOutput(t, ctx, c, "cat", "/tmp/mark"); got != "before\n" {
		t.Errorf("the restored sandbox's /tmp/mark holds %q, want %q", got, "before\n")
	}
	if err := c.Shutdown(ctx, 0); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.exit.Checkpointed {
			t.Errorf("Run of the restored sandbox after Shutdown = %+v, %v; want an exit", r.exit, r.err)
		}
	case <-ctx.Done():
		t.Fatal("Run of the restored sandbox did not return after Shutdown")
	}
}
