package sentry

import (
	"context"
	"syscall"
	"testing"
	"time"
)

func TestStartIdle(t *testing.T) {
	s := newSandbox(t, Config{})
	init, err := s.StartIdle()
	if err != nil {
		t.Fatal(err)
	}
	// An orphan: its parent exits at once, so it becomes init's child; once
	// it exits, init must reap it or it stays in /proc as a zombie. The
	// orphan runs until told to stop and the reap is polled for (up to 5 s),
	// so a loaded host cannot reorder the steps.
	r := execAndWait(t, s, sh(`tr '\0' ' ' < /proc/1/cmdline; echo
orphan=$(sh -c 'sh -c "until [ -e /tmp/go ]; do sleep 0.01; done" >/dev/null 2>&1 & echo $!')
test -e /proc/$orphan && echo orphan-running
touch /tmp/go; n=0
while [ -e /proc/$orphan ] && [ $n -lt 500 ]; do sleep 0.01; n=$((n+1)); done
test -e /proc/$orphan && echo "orphan-left $(cat /proc/$orphan/stat)" || echo orphan-reaped`))
	if r.stdout != "gvx-init \norphan-running\norphan-reaped\n" {
		t.Fatalf("idle init: %q %q", r.stdout, r.stderr)
	}
	// The image's files are not involved: it works with no shell at all.
	if r := execAndWait(t, s, ProcessSpec{Argv: []string{"rm", "/bin/sh"}}); r.status.ExitCode() != 0 {
		t.Fatalf("rm /bin/sh: %v %q", r.status, r.stderr)
	}
	if r := execAndWait(t, s, ProcessSpec{Argv: []string{"echo", "still serving"}}); r.stdout != "still serving\n" {
		t.Fatalf("exec: %q %q", r.stdout, r.stderr)
	}
	// SIGTERM ends it cleanly, so Shutdown is graceful.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if st, _ := init.Wait(); st.ExitCode() != 0 || st.Signal == syscall.SIGKILL {
		t.Fatalf("idle init ended with %v", st)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Shutdown took %v", d)
	}
}

// TestStartIdleEndsCleanlyOnAnEarlySIGTERM sends SIGTERM the moment
// StartIdle returns, before the init has run an instruction: it must still
// exit with status 0, as Shutdown and rungv's callers rely on.
func TestStartIdleEndsCleanlyOnAnEarlySIGTERM(t *testing.T) {
	for i := 0; i < 5; i++ {
		s := newSandbox(t, Config{})
		init, err := s.StartIdle()
		if err != nil {
			t.Fatal(err)
		}
		if err := init.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-init.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the idle init still runs 30 s after SIGTERM")
		}
		if st, _ := init.Wait(); st.ExitCode() != 0 {
			t.Fatalf("round %d: the idle init ended with %v (exit code %d), want status 0", i, st, st.ExitCode())
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
