package ext4lite

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestOracleWorkload drives a seeded random mix of operations through
// ext4lite and checks the image with the real tools: e2fsck must be clean,
// debugfs must dump the expected tree, and (as root) Linux must mount it
// and show the same tree, xattrs and hard links included.
func TestOracleWorkload(t *testing.T) {
	ops := 12000
	if testing.Short() {
		ops = 3000
	}
	seeds := []uint64{1, 2}
	// EXT4LITE_SOAK=n runs n more seeds, for soak testing.
	if n, _ := strconv.Atoi(os.Getenv("EXT4LITE_SOAK")); n > 0 {
		for s := range n {
			seeds = append(seeds, uint64(1000+s))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			runOracle(t, seed, ops)
		})
	}
}

func runOracle(t *testing.T, seed uint64, ops int) {
	path := newVolume(t, 256<<20)
	fs := openRW(t, path)
	w := newWorkload(t, fs, seed)
	start := time.Now()
	for i := 0; i < ops; i++ {
		w.step()
		// Reopen now and then: the journal is checkpointed, the caches
		// are dropped and everything is read back from disk.
		if i%2500 == 2499 {
			if err := fs.Close(); err != nil {
				t.Fatal(err)
			}
			fs = openRW(t, path)
			w.fs = fs
		}
	}
	t.Logf("%d operations in %v: %v; expected failures %v", w.total(), time.Since(start), w.ops, w.failed)
	w.verifyFS(fs)
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, path)

	// The tree as e2fsprogs reads it.
	out := filepath.Join(t.TempDir(), "rdump")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	debugfs(t, path, false, "rdump / "+out)
	w.verifyHost(out, hostCheck{})

	// The tree as Linux reads it.
	withLoopMount(t, path, func(mnt string) {
		w.verifyHost(mnt, hostCheck{special: true, hardlinks: true, xattrs: true, owners: true})
	})
	mustClean(t, path)
}

// withLoopMount mounts an image read-only through a loop device and runs
// fn on the mount point. It skips, saying why, if that is impossible.
func withLoopMount(t *testing.T, path string, fn func(mnt string)) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Logf("not root: skipping the loop-mount check of %s", path)
		return
	}
	mnt := t.TempDir()
	out, err := exec.Command("mount", "-t", "ext4", "-o", "loop,ro", path, mnt).CombinedOutput()
	if err != nil {
		t.Logf("loop mount impossible here (%v: %s): skipping the Linux check", err, out)
		return
	}
	defer func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	}()
	fn(mnt)
}
