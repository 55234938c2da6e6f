package sentry

import "testing"

// TestInterruptedFIFOOpenRestarts: an open(2) waiting for a FIFO's reader
// and interrupted by a signal whose handler has SA_RESTART restarts, as on
// Linux, instead of failing with EINTR (which failed runc's exec FIFO open,
// and so `docker run`, under load).
func TestInterruptedFIFOOpenRestarts(t *testing.T) {
	s := newSandbox(t, Config{})
	startIdle(t, s)
	installFstool(t, s)
	for i := 0; i < 3; i++ {
		if out := mustRun(t, s, "rm -f /tmp/fifo && /tmp/fstool fifosignal /tmp/fifo"); out != "restarted\n" {
			t.Fatalf("round %d: fstool printed %q, want \"restarted\"", i, out)
		}
	}
}
