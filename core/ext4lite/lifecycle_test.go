package ext4lite

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"z.gfire.dev/gvx/core/internal/eventually"
)

// TestOpenUnlinkedFiles: an unlinked file that is still referenced keeps
// its data on the orphan list; the last DecRef releases it; a crash in
// between leaves the orphan for the next Open to release.
func TestOpenUnlinkedFiles(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	f, _ := fs.Create(RootIno, "f", 0o644, Owner{})
	data := bytes.Repeat([]byte("x"), 1<<20)
	fs.WriteAt(f, data, 0)
	before, _ := fs.Statfs()
	if err := fs.IncRef(f); err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := fs.ReadAt(f, got, 0); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("unlinked open file unreadable: %v", err)
	}
	if _, err := fs.WriteAt(f, []byte("still writable"), 0); err != nil {
		t.Fatal(err)
	}
	mid, _ := fs.Statfs()
	if mid.BlocksFree != before.BlocksFree {
		t.Fatalf("space freed while the file is open: %d -> %d", before.BlocksFree, mid.BlocksFree)
	}
	if err := fs.DecRef(f); err != nil {
		t.Fatal(err)
	}
	after, _ := fs.Statfs()
	if after.BlocksFree != before.BlocksFree+256 || after.FilesFree != before.FilesFree+1 {
		t.Fatalf("last reference did not free the file: %+v -> %+v", before, after)
	}

	// A crash while an unlinked file is open.
	g, _ := fs.Create(RootIno, "g", 0o644, Owner{})
	fs.WriteAt(g, data, 0)
	fs.IncRef(g)
	fs.Unlink(RootIno, "g")
	fs.Sync()
	abandon(fs)
	ref := path + ".e2fsck"
	copyFile(t, path, ref)
	exec.Command("e2fsck", "-fy", ref).Run()
	mustClean(t, ref)
	fs = openRW(t, path)
	if fs.Stats().Orphans != 1 {
		t.Fatalf("released %d orphans, want 1", fs.Stats().Orphans)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, path)
}

// TestNoSpace fills the filesystem: writes come back short or with ENOSPC,
// nothing is corrupted, and deleting gives the space back exactly.
func TestNoSpace(t *testing.T) {
	path := newVolume(t, 32<<20)
	fs := openRW(t, path)
	start, _ := fs.Statfs()
	chunk := bytes.Repeat([]byte("y"), 1<<20)
	var files []string
	for i := 0; ; i++ {
		name := fmt.Sprintf("f%d", i)
		ino, err := fs.Create(RootIno, name, 0o644, Owner{})
		if errors.Is(err, unix.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
		n, err := fs.WriteAt(ino, chunk, 0)
		if errors.Is(err, unix.ENOSPC) || n < len(chunk) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	full, _ := fs.Statfs()
	if full.BlocksFree > 16 {
		t.Fatalf("%d blocks still free after ENOSPC", full.BlocksFree)
	}
	var dirs []string
	for i := 0; ; i++ {
		name := fmt.Sprintf("d%d", i)
		_, err := fs.Mkdir(RootIno, name, 0o755, Owner{})
		if errors.Is(err, unix.ENOSPC) {
			break
		}
		if err != nil || i > 1000 {
			t.Fatalf("mkdir on a full filesystem: %v", err)
		}
		dirs = append(dirs, name)
	}
	for _, d := range dirs {
		if err := fs.Rmdir(RootIno, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if err := fs.Unlink(RootIno, name); err != nil {
			t.Fatal(err)
		}
	}
	end, _ := fs.Statfs()
	if end.BlocksFree != start.BlocksFree || end.FilesFree != start.FilesFree {
		t.Fatalf("space not given back: %+v -> %+v", start, end)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, path)
	// Statfs agrees with dumpe2fs.
	out := debugfs(t, path, false, "stats")
	if !strings.Contains(out, "Free blocks:              "+strconv.FormatUint(end.BlocksFree, 10)) {
		t.Fatalf("debugfs disagrees about free blocks (%d):\n%s", end.BlocksFree, out)
	}
}

// TestCloseDiscardsFreedBlocks: the image file gives back the space of
// deleted files on Close.
func TestCloseDiscardsFreedBlocks(t *testing.T) {
	path := newVolume(t, 256<<20)
	fs := openRW(t, path)
	ino, _ := fs.Create(RootIno, "big", 0o644, Owner{})
	fs.WriteAt(ino, bytes.Repeat([]byte("z"), 64<<20), 0)
	fs.Close()
	var st syscall.Stat_t
	syscall.Stat(path, &st)
	full := st.Blocks * 512
	fs = openRW(t, path)
	fs.Unlink(RootIno, "big")
	fs.Close()
	syscall.Stat(path, &st)
	if got := st.Blocks * 512; got > full-60<<20 {
		t.Fatalf("image uses %d bytes after deleting 64 MiB (was %d)", got, full)
	}
	mustClean(t, path)
}

// TestDeepExtentTrees fragments a file into thousands of extents (a tree
// of depth two), then shrinks it back, with e2fsck checking each shape.
func TestDeepExtentTrees(t *testing.T) {
	path := newVolume(t, 128<<20)
	fs := openRW(t, path)
	ino, _ := fs.Create(RootIno, "frag", 0o644, Owner{})
	block := bytes.Repeat([]byte("f"), 4096)
	for i := range 3000 {
		if _, err := fs.WriteAt(ino, block, int64(i)*2*4096); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Sync(); err != nil {
		t.Fatal(err)
	}
	n, _ := fs.getInode(ino)
	if n.fmap.depth != 2 {
		t.Fatalf("tree depth %d, want 2", n.fmap.depth)
	}
	fs.Close()
	mustClean(t, path)
	fs = openRW(t, path)
	for _, size := range []int64{5000 * 4096, 1500 * 4096, 20 * 4096, 4096, 0} {
		// Punch a few holes in the middle first, to split extents.
		fs.Fallocate(ino, FallocPunchHole|FallocKeepSize, size/3, 4096)
		if err := fs.Truncate(ino, size); err != nil {
			t.Fatal(err)
		}
		fs.Close()
		mustClean(t, path)
		fs = openRW(t, path)
	}
	fs.Close()
}

// TestSharedXattrBlock: Linux shares identical attribute blocks between
// inodes; changing one inode's attributes must copy the block first.
func TestSharedXattrBlock(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot loop-mount to have Linux share an xattr block")
	}
	img := mkfsExt4(t, "64M")
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop mount impossible here (%v: %s)", err, out)
	}
	big := bytes.Repeat([]byte("s"), 1000)
	for _, name := range []string{"a", "b", "c"} {
		p := filepath.Join(mnt, name)
		os.WriteFile(p, nil, 0o644)
		unix.Setxattr(p, "user.big", big, 0)
		unix.Setxattr(p, "user.other", big[:300], 0)
	}
	exec.Command("umount", mnt).Run()
	stat := debugfs(t, img, false, "stat /a")
	if !strings.Contains(stat, "File ACL: ") || strings.Contains(stat, "File ACL: 0") {
		t.Fatalf("no xattr block:\n%s", stat)
	}
	blkA := between(stat, "File ACL: ", "\n")
	if b := between(debugfs(t, img, false, "stat /b"), "File ACL: ", "\n"); b != blkA {
		t.Skipf("Linux did not share the block (%s vs %s)", blkA, b)
	}
	fs := openRW(t, img)
	a := mustLookup(t, fs, RootIno, "a")
	c := mustLookup(t, fs, RootIno, "c")
	if err := fs.SetXattr(a, "user.big", []byte("changed"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Unlink(RootIno, "c"); err != nil || c == 0 {
		t.Fatal(err)
	}
	b := mustLookup(t, fs, RootIno, "b")
	if v, _ := fs.GetXattr(b, "user.big"); !bytes.Equal(v, big) {
		t.Fatal("changing a's xattrs changed b's")
	}
	fs.Close()
	mustClean(t, img)
	withLoopMount(t, img, func(mnt string) {
		buf := make([]byte, 2000)
		n, err := unix.Getxattr(filepath.Join(mnt, "a"), "user.big", buf)
		if err != nil || string(buf[:n]) != "changed" {
			t.Fatalf("a: %q %v", buf[:n], err)
		}
		n, err = unix.Getxattr(filepath.Join(mnt, "b"), "user.big", buf)
		if err != nil || !bytes.Equal(buf[:n], big) {
			t.Fatalf("b: %v", err)
		}
	})
}

func between(s, a, b string) string {
	_, rest, _ := strings.Cut(s, a)
	v, _, _ := strings.Cut(rest, b)
	return strings.TrimSpace(v)
}

// TestACLsAndTimes: ACLs and nanosecond, pre-1970 and post-2038
// timestamps written by ext4lite read the same in Linux, and ACLs Linux
// writes read the same in ext4lite.
func TestACLsAndTimes(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	f, _ := fs.Create(RootIno, "f", 0o640, Owner{})
	// user::rw- user:1000:r-- group::r-- mask::r-- other::---
	acl := []byte{2, 0, 0, 0,
		1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff,
		2, 0, 4, 0, 0xe8, 3, 0, 0,
		4, 0, 4, 0, 0xff, 0xff, 0xff, 0xff,
		0x10, 0, 4, 0, 0xff, 0xff, 0xff, 0xff,
		0x20, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	if err := fs.SetXattr(f, "system.posix_acl_access", acl, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := fs.GetXattr(f, "system.posix_acl_access"); err != nil || !bytes.Equal(v, acl) {
		t.Fatalf("ACL round trip: %x %v", v, err)
	}
	times := map[string]Timespec{
		"old":    {Sec: -1234567890, Nsec: 5},
		"future": {Sec: 5000000000, Nsec: 999999999},
		"now":    {Sec: 1700000000, Nsec: 123456789},
	}
	for name, ts := range times {
		ino, _ := fs.Create(RootIno, name, 0o644, Owner{})
		if err := fs.SetAttr(ino, SetAttr{Mask: SetMtime | SetAtime, Mtime: ts, Atime: ts}); err != nil {
			t.Fatal(err)
		}
	}
	fs.Close()
	mustClean(t, path)
	withLoopMount(t, path, func(mnt string) {
		buf := make([]byte, 200)
		n, err := unix.Getxattr(filepath.Join(mnt, "f"), "system.posix_acl_access", buf)
		if err != nil || !bytes.Equal(buf[:n], acl) {
			t.Fatalf("Linux reads the ACL as %x (%v), want %x", buf[:n], err, acl)
		}
		for name, ts := range times {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(mnt, name), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mtim.Sec != ts.Sec || st.Mtim.Nsec != ts.Nsec {
				t.Fatalf("%s: Linux reads mtime %v, want %v", name, st.Mtim, ts)
			}
		}
	})
}

// TestPanicsBecomeErrors: a panic inside an operation (here provoked by
// wrecking internal state) comes back as ErrInternal, fails the
// filesystem, and never reaches the image.
func TestPanicsBecomeErrors(t *testing.T) {
	recoverPanics = true
	defer func() { recoverPanics = false }()
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	if _, err := fs.Create(RootIno, "kept", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	fs.Sync()
	groups := fs.groups
	fs.groups = nil
	if _, err := fs.Create(RootIno, "boom", 0o644, Owner{}); !errors.Is(err, ErrInternal) || !errors.Is(err, unix.EIO) {
		t.Fatalf("create with wrecked state: %v", err)
	}
	fs.groups = groups
	if _, err := fs.Create(RootIno, "after", 0o644, Owner{}); !errors.Is(err, ErrFailed) {
		t.Fatalf("change after an internal error: %v", err)
	}
	if _, err := fs.Lookup(RootIno, "kept"); err != nil {
		t.Fatalf("reads fail after an internal error: %v", err)
	}
	// The image keeps its last committed state, journal included.
	fs.Close()
	fs = openRW(t, path)
	if _, err := fs.Lookup(RootIno, "boom"); err == nil {
		t.Fatal("the failed change reached the image")
	}
	if _, err := fs.Lookup(RootIno, "kept"); err != nil {
		t.Fatal(err)
	}
	fs.Close()
	mustClean(t, path)
}

// TestBackgroundCommit: a change reaches the journal while the filesystem
// sits idle, committed in the background once older than the commit
// interval.
func TestBackgroundCommit(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openWith(t, path, Options{CommitInterval: 50 * time.Millisecond})
	if _, err := fs.Create(RootIno, "idle", 0o644, Owner{}); err != nil {
		t.Fatal(err)
	}
	commits := fs.Stats().Commits
	eventually.Within(t, 10*time.Second, "the idle filesystem to commit its change", func() (bool, error) {
		return fs.Stats().Commits > commits, nil
	})
	abandon(fs)
	fs = openRW(t, path)
	if _, err := fs.Lookup(RootIno, "idle"); err != nil {
		t.Fatalf("change made before an idle spell lost in a crash: %v", err)
	}
}

// TestTmpfile: O_TMPFILE files are invisible until linked, vanish when
// dropped, and survive a crash only as orphans to release.
func TestTmpfile(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	before, _ := fs.Statfs()
	tmp, err := fs.CreateTmpfile(RootIno, 0o600, Owner{})
	if err != nil {
		t.Fatal(err)
	}
	fs.WriteAt(tmp, bytes.Repeat([]byte("t"), 100000), 0)
	if err := fs.Link(RootIno, "named", tmp); err != nil {
		t.Fatal(err)
	}
	if err := fs.DecRef(tmp); err != nil {
		t.Fatal(err)
	}
	if st, _ := fs.Stat(mustLookup(t, fs, RootIno, "named")); st.Nlink != 1 || st.Size != 100000 {
		t.Fatalf("linked tmpfile: %+v", st)
	}
	gone, _ := fs.CreateTmpfile(RootIno, 0o600, Owner{})
	fs.WriteAt(gone, make([]byte, 50000), 0)
	fs.DecRef(gone)
	if _, err := fs.Stat(gone); err == nil {
		t.Fatal("dropped tmpfile still exists")
	}
	crashed, _ := fs.CreateTmpfile(RootIno, 0o600, Owner{})
	fs.WriteAt(crashed, make([]byte, 50000), 0)
	fs.Sync()
	abandon(fs)
	fs = openRW(t, path)
	if fs.Stats().Orphans != 1 {
		t.Fatalf("released %d orphans, want the tmpfile", fs.Stats().Orphans)
	}
	fs.Unlink(RootIno, "named")
	after, _ := fs.Statfs()
	if after.BlocksFree != before.BlocksFree || after.FilesFree != before.FilesFree {
		t.Fatalf("space leaked: %+v -> %+v", before, after)
	}
	fs.Close()
	mustClean(t, path)
}

// TestNoSpaceWorkload runs the random workload on a filesystem too small
// for it: every change may meet ENOSPC and must then change nothing (or,
// for writes, write a prefix), and the image stays consistent.
func TestNoSpaceWorkload(t *testing.T) {
	seeds := []uint64{31, 32}
	if n, _ := strconv.Atoi(os.Getenv("EXT4LITE_SOAK")); n > 0 {
		for s := range 4 * n {
			seeds = append(seeds, uint64(3000+s))
		}
	}
	for _, seed := range seeds {
		path := newVolume(t, 16<<20)
		fs := openRW(t, path)
		w := newWorkload(t, fs, seed)
		w.allowNoSpace = true
		w.paranoid = true
		for i := range 4000 {
			w.step()
			if i%1000 == 999 {
				fs.Close()
				fs = openRW(t, path)
				w.fs = fs
			}
		}
		nospc := 0
		for k, v := range w.failed {
			if strings.HasSuffix(k, "-nospc") {
				nospc += v
			}
		}
		if nospc < 50 {
			t.Fatalf("seed %d: only %d changes met ENOSPC; the test does not test", seed, nospc)
		}
		t.Logf("seed %d: %d changes met ENOSPC", seed, nospc)
		w.verifyFS(fs)
		fs.Close()
		mustClean(t, path)
	}
}
