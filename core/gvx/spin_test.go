package gvx

import (
	"os"
	"testing"
)

// TestSpinAuto: with SpinAuto a sandbox spins only while this process runs
// no more than twice as many sandboxes as it has CPUs; SpinOn and SpinOff are obeyed
// whatever runs. rungv reports what it does in Info.
func TestSpinAuto(t *testing.T) {
	if v, ok := os.LookupEnv("GVX_SPIN"); ok {
		t.Skipf("GVX_SPIN=%s decides for the sandboxes SpinAuto lets spin", v)
	}
	cpus := usableCPUs()
	n := 2*cpus + 1
	for i := 0; i < n; i++ {
		want := spinFits(liveSandboxes.Load()+1, cpus)
		sb := newSandbox(t, config())
		if got := sb.Info().Spinning; got != want {
			t.Fatalf("sandbox %d of %d on %d CPUs: spinning %v, want %v", i+1, n, cpus, got, want)
		}
	}
	if live := liveSandboxes.Load(); spinFits(live, cpus) {
		t.Fatalf("%d live sandboxes after starting %d, and still under the limit", live, n)
	}
	for mode, want := range map[SpinMode]bool{SpinOn: true, SpinOff: false} {
		cfg := config()
		cfg.Spin = mode
		if got := newSandbox(t, cfg).Info().Spinning; got != want {
			t.Errorf("Spin %d with %d live sandboxes: spinning %v", mode, liveSandboxes.Load(), got)
		}
	}
	cfg := config()
	cfg.Spin = 7
	if _, err := cfg.args(3); err == nil {
		t.Error("Spin 7 accepted")
	}
}
