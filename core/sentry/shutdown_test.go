package sentry

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestShutdownGraceful(t *testing.T) {
	s := newSandbox(t, Config{})
	var out syncBuffer
	p, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.01; done`}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "init to be ready", func() bool { return strings.Contains(out.String(), "ready") })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	st, _ := p.Wait()
	if st.ExitCode() != 0 || !strings.Contains(out.String(), "bye") {
		t.Fatalf("init %v output %q, want a clean exit after its TERM trap", st, out.String())
	}
	if _, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Exec after Shutdown: %v, want ErrClosed", err)
	}
}

func TestShutdownDeadlineKills(t *testing.T) {
	s := newSandbox(t, Config{})
	var out syncBuffer
	p, err := s.Start(ProcessSpec{Argv: []string{"/bin/sh", "-c", `trap '' TERM; echo ready; while :; do sleep 0.01; done`}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "init to be ready", func() bool { return strings.Contains(out.String(), "ready") })
	other, err := s.Exec(context.Background(), ProcessSpec{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
	for _, q := range []*Process{p, other} {
		if st, _ := q.Wait(); st.Signal != syscall.SIGKILL {
			t.Errorf("process %d: %v, want SIGKILL", q.PID(), st)
		}
	}
	// The process can host a new sandbox.
	s2 := newSandbox(t, Config{})
	if r := startAndWait(t, s2, ProcessSpec{Argv: []string{"echo", "again"}}); r.stdout != "again\n" {
		t.Fatalf("second sandbox: %q", r.stdout)
	}
}

func TestLogWriter(t *testing.T) {
	var log syncBuffer
	s := newSandbox(t, Config{LogWriter: &log})
	startAndWait(t, s, ProcessSpec{Argv: []string{"true"}})
	if !strings.Contains(log.String(), "EXEC") {
		t.Fatalf("gVisor log has no EXEC line: %q", log.String())
	}
	s.Close()
	s2 := newSandbox(t, Config{}) // nil: discarded
	startAndWait(t, s2, ProcessSpec{Argv: []string{"true"}})
	if n := strings.Count(log.String(), "EXEC"); n != 1 {
		t.Fatalf("the first sandbox's log writer got %d EXEC lines, want 1", n)
	}
}
