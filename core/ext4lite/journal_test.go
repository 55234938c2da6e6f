package ext4lite

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
	"z.gfire.dev/gvx/core/internal/filehash"
)

// abandon drops fs as a crash would: nothing more reaches the device.
func abandon(fs *FS) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.closed = true
	fs.dev.Close()
}

func readSuper(t testing.TB, path string) *disk.Superblock {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, disk.SuperblockSize)
	if _, err := f.ReadAt(buf, disk.SuperblockOffset); err != nil {
		t.Fatal(err)
	}
	sb, err := disk.ParseSuperblock(buf)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

func readBlock(t testing.TB, path string, blk int64) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	if _, err := f.ReadAt(buf, blk*4096); err != nil {
		t.Fatal(err)
	}
	return buf
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
}

// TestReplayDebugfsJournal replays transactions that debugfs wrote (with
// and without checksums, with a revoke record) and compares the result
// with e2fsck's own replay.
func TestReplayDebugfsJournal(t *testing.T) {
	for _, csum := range []string{"", "-c"} {
		img := mkfsExt4(t, "64M")
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		os.WriteFile(a, bytes.Repeat([]byte("AAAA"), 2048), 0o644)
		os.WriteFile(b, bytes.Repeat([]byte("B"), 4096), 0o644)
		cmd := exec.Command(needTool(t, "debugfs"), "-w", "-f", "-", img)
		cmd.Stdin = strings.NewReader(fmt.Sprintf("jo %s\njw -b 9000,9001 %s\njw -b 9002 %s\njw -r 9001\njc\n", csum, a, b))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("debugfs: %v %s", err, out)
		}
		if !readSuper(t, img).HasIncompat(disk.IncompatRecover) {
			t.Fatal("debugfs left no transaction to recover")
		}
		ref := img + ".e2fsck"
		copyFile(t, img, ref)
		exec.Command("e2fsck", "-fy", ref).Run()

		fs := openRW(t, img)
		if fs.Stats().Replayed != 2 {
			t.Errorf("replayed %d blocks, want 2 (one revoked)", fs.Stats().Replayed)
		}
		if err := fs.Close(); err != nil {
			t.Fatal(err)
		}
		for _, blk := range []int64{9000, 9001, 9002} {
			if !bytes.Equal(readBlock(t, img, blk), readBlock(t, ref, blk)) {
				t.Errorf("jo %q: block %d differs from e2fsck's replay", csum, blk)
			}
		}
		if bytes.Equal(readBlock(t, img, 9001), bytes.Repeat([]byte("AAAA"), 1024)) {
			t.Errorf("revoked block 9001 was replayed")
		}
		mustClean(t, img)
	}
}

// TestOwnJournalReplayedByOthers leaves committed, unchecked
// transactions in an ext4lite journal and has e2fsck, Linux and ext4lite
// replay them.
func TestOwnJournalReplayedByOthers(t *testing.T) {
	path := newVolume(t, 128<<20)
	fs := openRW(t, path)
	w := newWorkload(t, fs, 7)
	for range 1500 {
		w.step()
	}
	if err := fs.Sync(); err != nil {
		t.Fatal(err)
	}
	// Changes after the last commit must vanish in every replay; they do
	// not touch the model.
	if _, err := fs.Create(RootIno, "uncommitted", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	if st := fs.Stats(); st.Commits == 0 {
		t.Fatal("nothing committed")
	}
	abandon(fs)
	if !readSuper(t, path).HasIncompat(disk.IncompatRecover) {
		t.Fatal("needs_recovery is clear although transactions wait in the journal")
	}

	// e2fsck replays it, then finds nothing to fix.
	ref := path + ".e2fsck"
	copyFile(t, path, ref)
	out, _ := exec.Command("e2fsck", "-fy", ref).CombinedOutput()
	t.Logf("e2fsck -fy: %s", out)
	mustClean(t, ref)

	// Linux replays it and shows the model's tree.
	kern := path + ".kernel"
	copyFile(t, path, kern)
	if os.Geteuid() == 0 {
		mnt := t.TempDir()
		if out, err := exec.Command("mount", "-o", "loop", kern, mnt).CombinedOutput(); err != nil {
			t.Logf("loop mount impossible (%v: %s): skipping the Linux replay", err, out)
		} else {
			w.verifyHost(mnt, hostCheck{special: true, hardlinks: true, xattrs: true, owners: true})
			if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
				t.Fatalf("umount: %v %s", err, out)
			}
			mustClean(t, kern)
		}
	}

	// ext4lite replays it in memory for a read-only open, leaving the
	// image alone.
	sum := filehash.SHA256(t, path)
	ro := openRO(t, path)
	w.fs = ro
	w.verifyFS(ro)
	ro.Close()
	if filehash.SHA256(t, path) != sum {
		t.Fatal("a read-only open changed the image")
	}

	// ext4lite replays it.
	fs = openRW(t, path)
	if fs.Stats().Replayed == 0 {
		t.Fatal("nothing replayed")
	}
	w.fs = fs
	w.verifyFS(fs)
	if _, err := fs.Lookup(RootIno, "uncommitted"); err == nil {
		t.Fatal("an uncommitted change survived the crash")
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, path)
}

// TestReplayKernelJournal has Linux leave committed transactions (with
// revoke records) in its journal by shutting the filesystem down, and
// replays them with ext4lite.
func TestReplayKernelJournal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot loop-mount to have Linux write a journal")
	}
	img := mkfsExt4(t, "128M")
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop mount impossible here (%v: %s)", err, out)
	}
	unmounted := false
	defer func() {
		if !unmounted {
			exec.Command("umount", mnt).Run()
		}
	}()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Metadata that will be freed while still in the journal makes the
	// kernel write revoke records.
	must(os.MkdirAll(filepath.Join(mnt, "doomed"), 0o755))
	for i := range 600 {
		must(os.WriteFile(filepath.Join(mnt, "doomed", fmt.Sprintf("file-with-a-long-name-%d", i)), []byte("x"), 0o644))
	}
	must(exec.Command("sync").Run())
	must(os.RemoveAll(filepath.Join(mnt, "doomed")))
	must(os.MkdirAll(filepath.Join(mnt, "kept/sub"), 0o755))
	for i := range 50 {
		must(os.WriteFile(filepath.Join(mnt, "kept/sub", fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{byte(i)}, 5000), 0o644))
	}
	must(unix.Setxattr(filepath.Join(mnt, "kept"), "user.k", []byte("v"), 0))
	must(exec.Command("sync").Run())
	// Shut down with the log flushed but nothing checkpointed.
	f, err := os.Open(mnt)
	must(err)
	const ext4IocShutdown = 0x8004587D
	const logFlush = 1 // EXT4_GOING_FLAGS_LOGFLUSH
	if err := unix.IoctlSetPointerInt(int(f.Fd()), ext4IocShutdown, logFlush); err != nil {
		f.Close()
		t.Skipf("EXT4_IOC_SHUTDOWN: %v", err)
	}
	f.Close()
	must(exec.Command("umount", mnt).Run())
	unmounted = true
	if !readSuper(t, img).HasIncompat(disk.IncompatRecover) {
		t.Skip("Linux left nothing to recover")
	}
	logdump := debugfs(t, img, false, "logdump")
	if !strings.Contains(logdump, "revoke") {
		t.Logf("no revoke records in the kernel journal:\n%s", logdump)
	}

	fs := openRW(t, img)
	st := fs.Stats()
	t.Logf("replayed %d blocks, %d revoked", st.Replayed, st.Revoked)
	if strings.Contains(logdump, "revoke") && st.Revoked == 0 {
		t.Error("the kernel journal has revoke records but no block was skipped")
	}
	if _, err := fs.Lookup(RootIno, "doomed"); err == nil {
		t.Fatal("removed directory is back after replay")
	}
	kept := mustLookup(t, fs, RootIno, "kept")
	sub := mustLookup(t, fs, kept, "sub")
	for i := range 50 {
		ino := mustLookup(t, fs, sub, fmt.Sprintf("f%d", i))
		buf := make([]byte, 5000)
		if _, err := fs.ReadAt(ino, buf, 0); err != nil || !bytes.Equal(buf, bytes.Repeat([]byte{byte(i)}, 5000)) {
			t.Fatalf("f%d: %v", i, err)
		}
	}
	if v, err := fs.GetXattr(kept, "user.k"); err != nil || string(v) != "v" {
		t.Fatalf("xattr: %q %v", v, err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, img)
}
