package gvx

import (
	"context"
	"strings"
	"syscall"
	"testing"
)

// notifyWriter signals started on the first write.
type notifyWriter struct {
	started chan struct{}
	once    bool
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	if !w.once {
		w.once = true
		close(w.started)
	}
	return len(p), nil
}

// checkCrashError fails t unless err says that rungv crashed, how it
// ended and what it printed.
func checkCrashError(t *testing.T, what string, code int, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s returned exit code %d, no error, for a rungv that crashed", what, code)
	}
	msg := err.Error()
	t.Logf("%s: %.600s", what, msg)
	for _, want := range []string{"(rungv exited with status 2)", "rungv crashed:\nSIGABRT: abort\nPC="} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: the error does not say %q:\n%.3000s", what, want, msg)
		}
	}
	if len(msg) > 12<<10 {
		t.Errorf("%s: the error carries the whole goroutine dump (%d bytes)", what, len(msg))
	}
}

// TestRunWhenRungvCrashes makes rungv itself die with Go's crash status, 2,
// while its command sleeps: SIGABRT makes the Go runtime print a trace and
// exit 2. Run must say that rungv failed, not that the command exited 2.
func TestRunWhenRungvCrashes(t *testing.T) {
	cfg := config()
	cfg.KeepAlive = false
	cfg.Cmd = []string{"/bin/sh", "-c", "sleep 600"}
	sb := newSandbox(t, cfg)
	if err := syscall.Kill(sb.PID(), syscall.SIGABRT); err != nil {
		t.Fatal(err)
	}
	code, err := sb.Run(context.Background())
	checkCrashError(t, "Run", code, err)
}

// TestExecWhenRungvCrashes is TestRunWhenRungvCrashes for an exec that is
// running (it wrote its first line) when rungv dies.
func TestExecWhenRungvCrashes(t *testing.T) {
	sb := newSandbox(t, config())
	w := &notifyWriter{started: make(chan struct{})}
	type result struct {
		res *ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := sb.Exec(context.Background(), []string{"/bin/sh", "-c", "echo started; sleep 600"}, &ExecOptions{Stdout: w})
		done <- result{res, err}
	}()
	<-w.started
	if err := syscall.Kill(sb.PID(), syscall.SIGABRT); err != nil {
		t.Fatal(err)
	}
	r := <-done
	code := 0
	if r.res != nil {
		code = r.res.ExitCode
	}
	checkCrashError(t, "Exec", code, r.err)
}

// TestRunAfterRungvExited calls Run only once rungv is gone, so that its
// Wait finds no one to answer: the command's exit status must come from
// the exit status pipe, however rungv itself exited.
func TestRunAfterRungvExited(t *testing.T) {
	for _, c := range []struct {
		script string
		want   int
	}{{"exit 3", 3}, {"exit 0", 0}, {"kill -9 $$", 128 + 9}} {
		cfg := config()
		cfg.KeepAlive = false
		cfg.Cmd = []string{"/bin/sh", "-c", c.script}
		sb := newSandbox(t, cfg)
		<-sb.exited
		code, err := sb.Run(context.Background())
		if err != nil || code != c.want {
			t.Errorf("%q: Run after rungv exited: %d, %v; want %d", c.script, code, err, c.want)
		}
	}
}
