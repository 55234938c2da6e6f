package gvx

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/spec"
)

// shortenClose sets Close's grace period and margin for one test.
func shortenClose(t *testing.T, grace, margin time.Duration) {
	t.Helper()
	oldGrace, oldMargin := closeGrace, closeMargin
	closeGrace, closeMargin = grace, margin
	t.Cleanup(func() { closeGrace, closeMargin = oldGrace, oldMargin })
}

// checkStopFailed checks that err is Close's report of a sandbox that did
// not stop cleanly and says each of want; a second Close must return the
// same error, and rungv must be gone.
func checkStopFailed(t *testing.T, sb *Sandbox, err error, want ...string) {
	t.Helper()
	t.Logf("Close: %v", err)
	if !errors.Is(err, ErrStopFailed) {
		t.Fatalf("Close: %v; want an error wrapping ErrStopFailed", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Close's error does not say %q:\n%v", w, err)
		}
	}
	if again := sb.Close(); again != err {
		t.Errorf("second Close: %v; want the first's error", again)
	}
	if err := syscall.Kill(sb.PID(), 0); err == nil {
		t.Errorf("rungv %d still runs after Close", sb.PID())
	}
}

// TestCloseOfAStoppedSandboxIsNil: Close of a sandbox that stops, however
// it stops, returns nil, twice: one whose init exits at SIGTERM, and one
// whose init ignores SIGTERM, which rungv kills once the grace period is
// over, as docker stop does.
func TestCloseOfAStoppedSandboxIsNil(t *testing.T) {
	sb := newSandbox(t, config())
	if err := sb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	shortenClose(t, 300*time.Millisecond, closeMargin)
	cfg := config()
	cfg.KeepAlive = false
	cfg.Cmd = []string{"/bin/sh", "-c", `trap "" TERM; touch /tmp/trapped; while :; do sleep 1; done`}
	sb = newSandbox(t, cfg)
	eventually.Within(t, 30*time.Second, "the init setting its SIGTERM trap", func() (bool, error) {
		_, err := sb.Stat(context.Background(), "/tmp/trapped")
		return err == nil, err
	})
	start := time.Now()
	if err := sb.Close(); err != nil {
		t.Fatalf("Close of a sandbox whose init ignores SIGTERM: %v", err)
	}
	if took := time.Since(start); took < closeGrace {
		t.Errorf("Close took %v, less than the grace period %v: the init was not given it", took, closeGrace)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCloseKillsAStalledSandbox: a rungv that does not shut the sandbox
// down within the grace period and the margin, here one stopped with
// SIGSTOP as a stalled or starved one would be, is killed, and Close says
// so.
func TestCloseKillsAStalledSandbox(t *testing.T) {
	shortenClose(t, 200*time.Millisecond, 300*time.Millisecond)
	sb := newSandbox(t, config())
	if err := syscall.Kill(sb.PID(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := sb.Close()
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("Close of a stalled sandbox took %v; want about %v", took, closeGrace+closeMargin)
	}
	checkStopFailed(t, sb, err, "so Close killed it with SIGKILL", "500ms", "check the host's load")
}

// TestCloseAfterRungvWasKilled: a rungv killed from outside before Close
// never reported the sandbox's end, and Close says how it ended.
func TestCloseAfterRungvWasKilled(t *testing.T) {
	sb := newSandbox(t, config())
	if err := syscall.Kill(sb.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	checkStopFailed(t, sb, sb.Close(), "rungv ended before it reported the sandbox's end", "rungv was killed by SIGKILL")
}

// TestCloseSaysTheVolumesWereNotWrittenBack: when rungv cannot write back
// a volume as it shuts the sandbox down, here because the host refuses
// its writes to files from then on (RLIMIT_FSIZE 0: EFBIG, as a full disk
// gives ENOSPC), Close returns rungv's error.
func TestCloseSaysTheVolumesWereNotWrittenBack(t *testing.T) {
	cfg := config()
	cfg.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: filepath.Join(t.TempDir(), "data.ext4"), Target: "/data"}}
	sb := newSandbox(t, cfg)
	sh(t, sb, "echo data > /data/f && sync", nil)
	if err := unix.Prlimit(sb.PID(), unix.RLIMIT_FSIZE, &unix.Rlimit{}, nil); err != nil {
		t.Fatal(err)
	}
	checkStopFailed(t, sb, sb.Close(), "rungv could not shut the sandbox down", "closing the volume", "file too large")
}
