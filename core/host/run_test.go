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
	p := testPlan(t)
	p.KeepAlive = true
	p.Info = control.SandboxInfo{ID: "test"}
	sock := filepath.Join(t.TempDir(), "control.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	p.Control = Control{Listener: l}
	h := &testHooks{t: t}
	type result struct {
		exit Exit
		err  error
	}
	done := make(chan result, 1)
	go func() {
		exit, err := Run(context.Background(), p, h.hooks())
		done <- result{exit, err}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := control.Dial(ctx, sock)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer c.Close()
	if info := c.Info(); info.ID != "test" || info.PID != os.Getpid() || info.Platform != string(sentry.PlatformSystrap) {
		t.Errorf("Info = %+v, want ID test, this process's PID and the systrap platform", info)
	}
	var out bytes.Buffer
	res, err := c.Exec(ctx, control.ExecRequest{Argv: []string{"echo", "hello"}}, control.ExecIO{Stdout: &out, InMemory: true})
	if err != nil || res.ExitCode != 0 || out.String() != "hello\n" {
		t.Fatalf("Exec(echo hello) = %+v, %v, output %q; want exit 0 and hello", res, err, out.String())
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
