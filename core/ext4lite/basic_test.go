package ext4lite

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func newVolume(t testing.TB, size int64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vol.img")
	if err := Create(path, size); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestBasicOps(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	root := RootIno
	dir, err := fs.Mkdir(root, "dir", 0o755, Owner{1000, 1000})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(dir, "file", 0o644, Owner{1000, 1000})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("hello world "), 5000)
	if n, err := fs.WriteAt(f, data, 0); err != nil || n != len(data) {
		t.Fatalf("write: %d %v", n, err)
	}
	got := make([]byte, len(data)+10)
	n, err := fs.ReadAt(f, got, 0)
	if n != len(data) || !errors.Is(err, io.EOF) || !bytes.Equal(got[:n], data) {
		t.Fatalf("read: %d %v", n, err)
	}
	if _, err := fs.Create(dir, "file", 0o644, Owner{}); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("create existing: %v", err)
	}
	if _, err := fs.Symlink(root, "fast", "dir/file", Owner{}); err != nil {
		t.Fatal(err)
	}
	long := string(bytes.Repeat([]byte("x"), 100))
	if _, err := fs.Symlink(root, "slow", long, Owner{}); err != nil {
		t.Fatal(err)
	}
	if got, err := fs.Readlink(mustLookup(t, fs, root, "slow")); err != nil || got != long {
		t.Fatalf("readlink slow: %q %v", got, err)
	}
	if err := fs.Link(root, "hard", f); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Mknod(root, "wh", S_IFCHR, Dev{}, Owner{}); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetXattr(f, "user.test", []byte("value"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.SetXattr(f, "trusted.big", bytes.Repeat([]byte("v"), 1000), 0); err != nil {
		t.Fatal(err)
	}
	if v, err := fs.GetXattr(f, "trusted.big"); err != nil || len(v) != 1000 {
		t.Fatalf("getxattr: %d %v", len(v), err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, path)
	t.Log(debugfs(t, path, false, "ls -l /dir"))
}

func mustLookup(t testing.TB, fs *FS, dir Ino, name string) Ino {
	t.Helper()
	ino, err := fs.Lookup(dir, name)
	if err != nil {
		t.Fatalf("lookup %q: %v", name, err)
	}
	return ino
}
