package gvx

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// useSpinBudget gives the test a spin budget of its own, so that sandboxes
// other tests and processes run on this host do not count.
func useSpinBudget(t *testing.T) string {
	t.Helper()
	if v, ok := os.LookupEnv(spinEnv); ok {
		t.Skipf(spinEnv+"=%s decides for the sandboxes the budget lets spin", v)
	}
	dir := t.TempDir()
	old, oldRunnable := spinDir, runnableThreads
	spinDir = dir
	// An idle host, whatever else this one runs meanwhile.
	runnableThreads = func() int { return 1 }
	t.Cleanup(func() { spinDir, runnableThreads = old, oldRunnable })
	return dir
}

// TestSpinAutoOnBusyHost: on a host whose CPUs others oversubscribe twice
// over, a sandbox does not spin and leaves the slots alone; with one
// runnable thread fewer it spins.
func TestSpinAutoOnBusyHost(t *testing.T) {
	dir := useSpinBudget(t)
	cpus := usableCPUs()
	for _, tc := range []struct {
		others int
		want   bool
	}{{2 * cpus, false}, {2*cpus - 1, true}} {
		runnableThreads = func() int { return 1 + tc.others }
		sb := newSandbox(t, config())
		if got := sb.Info().Spinning; got != tc.want {
			t.Errorf("%d other threads running on %d CPUs: spinning %v, want %v", tc.others, cpus, got, tc.want)
		}
		fd, err := unix.Open(filepath.Join(dir, "slot-0"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		free := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil
		unix.Close(fd)
		if free == tc.want {
			t.Errorf("%d other threads running: slot-0 free %v after the sandbox started; want it held only by a spinning sandbox", tc.others, free)
		}
		sb.Close()
	}
}

// TestSpinAuto: with Spin unset a sandbox spins only while no more than twice
// as many sandboxes as there are CPUs hold the budget's slots; a Spin set
// is obeyed whatever runs. rungv reports what it does in Info.
func TestSpinAuto(t *testing.T) {
	useSpinBudget(t)
	cpus := usableCPUs()
	n := 2*cpus + 1
	for i := 0; i < n; i++ {
		sb := newSandbox(t, config())
		if got, want := sb.Info().Spinning, i < 2*cpus; got != want {
			t.Fatalf("sandbox %d of %d on %d CPUs: spinning %v, want %v", i+1, n, cpus, got, want)
		}
	}
	for _, spin := range []bool{true, false} {
		cfg := config()
		cfg.Spin = &spin
		if got := newSandbox(t, cfg).Info().Spinning; got != spin {
			t.Errorf("Spin %v with the budget spent: spinning %v", spin, got)
		}
	}
}

// TestSpinBudgetIsSharedAndGivenBack: slots held through other open files —
// as another process's sandboxes hold them — count against this process's
// sandboxes, and a sandbox's slot is free again once it has exited.
func TestSpinBudgetIsSharedAndGivenBack(t *testing.T) {
	dir := useSpinBudget(t)
	cpus := usableCPUs()
	for i := 0; i < 2*cpus; i++ {
		if i == 1 {
			continue // the one slot left for this process
		}
		fd, err := unix.Open(filepath.Join(dir, fmt.Sprintf("slot-%d", i)), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatalf("locking slot %d: %v", i, err)
		}
	}
	first := newSandbox(t, config())
	if !first.Info().Spinning {
		t.Fatal("the first sandbox does not spin, with one slot free")
	}
	if newSandbox(t, config()).Info().Spinning {
		t.Fatal("a second sandbox spins, with every slot held")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if !newSandbox(t, config()).Info().Spinning {
		t.Fatal("a sandbox started after the spinning one exited does not spin")
	}
}

// TestSpinSlotDirRefusesOthersDirectory: a slot directory others may write
// is not used (the per-process count is, instead).
func TestSpinSlotDirRefusesOthersDirectory(t *testing.T) {
	dir := useSpinBudget(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := spinSlotDir(); err == nil {
		t.Fatalf("%s, writable by all, accepted as the spin slot directory", dir)
	}
}

// TestSpinOffTakesNoSlot: with $GVX_SPIN=0 rungv does not spin, so its
// sandboxes leave the slots to those that would.
func TestSpinOffTakesNoSlot(t *testing.T) {
	useSpinBudget(t)
	t.Setenv(spinEnv, "0")
	release, spin := takeSpinSlot()
	defer release()
	if spin {
		t.Fatal("GVX_SPIN=0, and the sandbox would spin")
	}
	os.Unsetenv(spinEnv)
	for i := 0; i < 2*usableCPUs(); i++ {
		release, spin := takeSpinSlot()
		defer release()
		if !spin {
			t.Fatalf("slot %d of %d taken, though only a GVX_SPIN=0 sandbox came before", i+1, 2*usableCPUs())
		}
	}
}
