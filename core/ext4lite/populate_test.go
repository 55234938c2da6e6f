package ext4lite

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// makeSourceTree builds a host tree with what mkfs.ext4 -d must carry
// over: xattrs (small, large, trusted), whiteouts, devices, FIFOs, hard
// links, sparse files, fast and slow symlinks, and a 3,000-entry directory.
func makeSourceTree(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot make device nodes and trusted xattrs for the mkfs -d tree")
	}
	src := filepath.Join(t.TempDir(), "src")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "big"), 0o755))
	must(os.MkdirAll(filepath.Join(src, "a/b/c"), 0o750))
	must(os.WriteFile(filepath.Join(src, "a/b/c/file"), []byte("hello"), 0o640))
	must(os.Link(filepath.Join(src, "a/b/c/file"), filepath.Join(src, "a/hardlink")))
	must(os.Link(filepath.Join(src, "a/b/c/file"), filepath.Join(src, "hardlink2")))
	must(unix.Setxattr(filepath.Join(src, "a/b/c/file"), "user.small", []byte("v"), 0))
	must(unix.Setxattr(filepath.Join(src, "a/b/c/file"), "user.large", make([]byte, 2000), 0))
	must(unix.Setxattr(filepath.Join(src, "a"), "trusted.overlay.opaque", []byte("y"), 0))
	must(unix.Mknod(filepath.Join(src, "a/whiteout"), unix.S_IFCHR, 0))
	must(unix.Mknod(filepath.Join(src, "blk"), unix.S_IFBLK|0o600, int(unix.Mkdev(8, 1))))
	must(unix.Mknod(filepath.Join(src, "chr"), unix.S_IFCHR|0o600, int(unix.Mkdev(300, 70000))))
	must(unix.Mkfifo(filepath.Join(src, "fifo"), 0o644))
	must(os.Symlink("a/b/c/file", filepath.Join(src, "fast")))
	long := ""
	for len(long) < 200 {
		long += "long/path/"
	}
	must(os.Symlink(long, filepath.Join(src, "slow")))
	sparse, err := os.Create(filepath.Join(src, "sparse"))
	must(err)
	for _, off := range []int64{0, 1 << 20, 10 << 20, 10<<20 + 4096} {
		_, err := sparse.WriteAt([]byte(fmt.Sprintf("data at %d", off)), off)
		must(err)
	}
	must(sparse.Truncate(20 << 20))
	must(sparse.Close())
	data := make([]byte, 3<<20+123)
	for i := range data {
		data[i] = byte(i * 7)
	}
	must(os.WriteFile(filepath.Join(src, "blob"), data, 0o600))
	for i := range 3000 {
		must(os.WriteFile(filepath.Join(src, "big", fmt.Sprintf("entry-%04d-with-a-longer-name", i)), nil, 0o644))
	}
	must(os.Chown(filepath.Join(src, "a/b"), 1234, 5678))
	return src
}

func TestMkfsPopulatedImage(t *testing.T) {
	src := makeSourceTree(t)
	img := mkfsExt4(t, "128M", "-d", src)
	fs := openRO(t, img)
	n := compareWithHost(t, fs, RootIno, src, "lost+found")
	t.Logf("%d entries read back identically", n)
	fs.Close()

	// Change it, then check it with e2fsck, Linux and ourselves.
	fs = openRW(t, img)
	big := mustLookup(t, fs, RootIno, "big")
	for i := range 500 {
		name := fmt.Sprintf("entry-%04d-with-a-longer-name", i*5)
		if err := fs.Unlink(big, name); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(src, "big", name)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 400 {
		name := fmt.Sprintf("new-%d", i)
		if _, err := fs.Create(big, name, 0o644, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	a := mustLookup(t, fs, RootIno, "a")
	if err := fs.SetXattr(a, "trusted.overlay.opaque", []byte("n"), XattrReplace); err != nil {
		t.Fatal(err)
	}
	file := mustLookup(t, fs, a, "hardlink")
	if err := fs.SetXattr(file, "user.large", []byte("short now"), XattrReplace); err != nil {
		t.Fatal(err)
	}
	sparse := mustLookup(t, fs, RootIno, "sparse")
	if _, err := fs.WriteAt(sparse, []byte("filled"), 5<<20); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, img)
	withLoopMount(t, img, func(mnt string) {
		out, err := exec.Command("sh", "-c", "ls "+filepath.Join(mnt, "big")+" | wc -l").Output()
		if err != nil || string(out) != "2900\n" {
			t.Fatalf("Linux lists %q entries (%v), want 2900", out, err)
		}
		v := make([]byte, 100)
		n, err := unix.Lgetxattr(filepath.Join(mnt, "a/b/c/file"), "user.large", v)
		if err != nil || string(v[:n]) != "short now" {
			t.Fatalf("Linux reads user.large %q %v", v[:n], err)
		}
	})
}
