package gvx

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/spec"
)

// TestCheckpointRestore saves a sandbox whose guest holds state in memory
// (a background counter) and in files, first running on, then stopping,
// and continues each snapshot in a new sandbox.
func TestCheckpointRestore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sb := newSandbox(t, config())
	if res := sh(t, sb, `echo kept > /tmp/file; (i=0; while :; do i=$((i+1)); echo $i > /tmp/i.new; mv /tmp/i.new /tmp/i; sleep 0.02; done) >/dev/null 2>&1 & echo started`, nil); res.ExitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	waitCount(t, sb, 5)

	running := filepath.Join(dir, "running.snap")
	res, err := sb.Checkpoint(ctx, running, CheckpointOptions{})
	if err != nil || res.Bytes == 0 {
		t.Fatalf("Checkpoint: %+v %v", res, err)
	}
	at := waitCount(t, sb, 5)
	if out := sh(t, sb, "echo still here", nil); string(out.Stdout) != "still here\n" {
		t.Fatalf("after a checkpoint that does not stop: %+v", out)
	}
	stopped := filepath.Join(dir, "stopped.snap")
	if _, err := sb.Checkpoint(ctx, stopped, CheckpointOptions{Stop: true}); err != nil {
		t.Fatalf("Checkpoint(Stop): %v", err)
	}
	if _, err := sb.Exec(ctx, []string{"true"}, nil); err == nil {
		t.Fatal("Exec after a stopping checkpoint succeeded")
	}

	for _, snap := range []string{running, stopped} {
		cfg := config()
		cfg.KeepAlive = false
		cfg.Restore = snap
		r := newSandbox(t, cfg)
		if got, err := r.ReadFile(ctx, "/tmp/file"); err != nil || string(got) != "kept\n" {
			t.Fatalf("%s: /tmp/file = %q, %v", filepath.Base(snap), got, err)
		}
		// The counter runs on from where it was, not from 1.
		if n := waitCount(t, r, 1); n < 5 {
			t.Fatalf("%s: the restored counter is at %d; it was at least 5", filepath.Base(snap), n)
		}
		if snap == stopped {
			if n := waitCount(t, r, at); n < at {
				t.Fatalf("the stopped snapshot's counter is at %d, below %d", n, at)
			}
		}
		r.Close()
	}

	cfg := config()
	cfg.Restore = stopped
	if _, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "restore: continues the snapshot's own init; leave entrypoint, cmd and keep_alive unset") {
		t.Fatalf("Restore with KeepAlive: %v", err)
	}
}

// TestCheckpointRefusesRunningExec: the refusal is an invalid argument
// that says what to do.
func TestCheckpointRefusesRunningExec(t *testing.T) {
	ctx := context.Background()
	sb := newSandbox(t, config())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb.Exec(ctx, []string{"sleep", "30"}, &ExecOptions{Exec: spec.Exec{Timeout: spec.Seconds(40 * time.Second)}})
	}()
	time.Sleep(300 * time.Millisecond)
	_, err := sb.Checkpoint(ctx, filepath.Join(t.TempDir(), "x.snap"), CheckpointOptions{})
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != CodeInvalid || !strings.Contains(err.Error(), "wait for them or kill them") {
		t.Fatalf("Checkpoint with an exec running: %v; want an invalid-argument error saying what to do", err)
	}
	sb.Close()
	<-done
}

// waitCount waits until the guest's counter in /tmp/i reaches n and
// returns it.
func waitCount(t *testing.T, sb *Sandbox, n int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := sb.ReadFile(context.Background(), "/tmp/i")
		var v int
		if err == nil {
			for _, c := range strings.TrimSpace(string(b)) {
				v = v*10 + int(c-'0')
			}
			if v >= n {
				return v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter did not reach %d (last %q, %v)", n, b, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
