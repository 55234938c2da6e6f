package ext4lite

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestErrnos checks the errors of invalid requests, the ones the Sentry
// passes on to the guest.
func TestErrnos(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	dir, _ := fs.Mkdir(RootIno, "dir", 0o755, Owner{})
	f, _ := fs.Create(RootIno, "f", 0o644, Owner{})
	fs.Create(dir, "child", 0o644, Owner{})
	long := strings.Repeat("n", 256)
	cases := []struct {
		name string
		err  error
		want unix.Errno
	}{
		{"create long name", second(fs.Create(RootIno, long, 0o644, Owner{})), unix.ENAMETOOLONG},
		{"create slash", second(fs.Create(RootIno, "a/b", 0o644, Owner{})), unix.EINVAL},
		{"create in file", second(fs.Create(f, "x", 0o644, Owner{})), unix.ENOTDIR},
		{"lookup missing", second(fs.Lookup(RootIno, "nope")), unix.ENOENT},
		{"lookup in file", second(fs.Lookup(f, "x")), unix.ENOTDIR},
		{"unlink dir", fs.Unlink(RootIno, "dir"), unix.EISDIR},
		{"rmdir file", fs.Rmdir(RootIno, "f"), unix.ENOTDIR},
		{"rmdir non-empty", fs.Rmdir(RootIno, "dir"), unix.ENOTEMPTY},
		{"rmdir dot", fs.Rmdir(dir, "."), unix.EINVAL},
		{"link dir", fs.Link(RootIno, "dir2", dir), unix.EPERM},
		{"link exists", fs.Link(RootIno, "dir", f), unix.EEXIST},
		{"rename missing", fs.Rename(RootIno, "nope", RootIno, "x", 0), unix.ENOENT},
		{"rename bad flags", fs.Rename(RootIno, "f", RootIno, "x", RenameExchange|RenameNoReplace), unix.EINVAL},
		{"rename into self", fs.Rename(RootIno, "dir", dir, "sub", 0), unix.EINVAL},
		{"write dir", second(fs.WriteAt(dir, []byte("x"), 0)), unix.EISDIR},
		{"read dir", second(fs.ReadAt(dir, make([]byte, 1), 0)), unix.EISDIR},
		{"write too far", second(fs.WriteAt(f, []byte("x"), 1<<44)), unix.EFBIG},
		{"truncate negative", fs.Truncate(f, -1), unix.EINVAL},
		{"truncate dir", fs.Truncate(dir, 0), unix.EISDIR},
		{"fallocate collapse", fs.Fallocate(f, 0x8, 0, 4096), unix.EOPNOTSUPP},
		{"punch without keep size", fs.Fallocate(f, FallocPunchHole, 0, 4096), unix.EOPNOTSUPP},
		{"readlink file", second(fs.Readlink(f)), unix.EINVAL},
		{"symlink too long", second(fs.Symlink(RootIno, "l", strings.Repeat("t", 4096), Owner{})), unix.ENAMETOOLONG},
		{"getxattr missing", second(fs.GetXattr(f, "user.nope")), unix.ENODATA},
		{"removexattr missing", fs.RemoveXattr(f, "user.nope"), unix.ENODATA},
		{"setxattr replace missing", fs.SetXattr(f, "user.a", []byte("v"), XattrReplace), unix.ENODATA},
		{"setxattr namespace", fs.SetXattr(f, "bogus.a", []byte("v"), 0), unix.EOPNOTSUPP},
		{"setxattr too big", fs.SetXattr(f, "user.big", make([]byte, 5000), 0), unix.ENOSPC},
		{"setxattr long name", fs.SetXattr(f, "user."+long, []byte("v"), 0), unix.ERANGE},
		{"stat free inode", second(fs.Stat(5000)), unix.ESTALE},
		{"decref unreferenced", fs.DecRef(f), unix.EINVAL},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
		}
	}
	fs.SetXattr(f, "user.a", []byte("v"), 0)
	if err := fs.SetXattr(f, "user.a", []byte("w"), XattrCreate); !errors.Is(err, unix.EEXIST) {
		t.Errorf("setxattr create existing: %v", err)
	}
	fs.Close()
	if _, err := fs.Stat(RootIno); !errors.Is(err, ErrClosed) {
		t.Errorf("stat after close: %v", err)
	}
	ro := openRO(t, path)
	if _, err := ro.Create(RootIno, "x", 0o644, Owner{}); !errors.Is(err, unix.EROFS) {
		t.Errorf("create read-only: %v", err)
	}
	mustClean(t, path)
}

func second[T any](_ T, err error) error { return err }

// TestReadDirOffsets: offsets resume a listing, stay valid while entries
// come and go, and never yield an entry twice.
func TestReadDirOffsets(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	dir, _ := fs.Mkdir(RootIno, "d", 0o755, Owner{})
	for i := range 2000 {
		fs.Create(dir, fmt.Sprintf("entry-%d", i), 0o644, Owner{})
	}
	seen := map[string]bool{}
	off := int64(0)
	for round := 0; ; round++ {
		var batch []Dirent
		if err := fs.ReadDir(dir, off, func(d Dirent) bool {
			batch = append(batch, d)
			return len(batch) < 37
		}); err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			break
		}
		for _, d := range batch {
			if seen[d.Name] {
				t.Fatalf("%q listed twice", d.Name)
			}
			seen[d.Name] = true
		}
		off = batch[len(batch)-1].Next
		// Delete some entries not yet listed and some already listed.
		fs.Unlink(dir, fmt.Sprintf("entry-%d", round*7))
		fs.Unlink(dir, fmt.Sprintf("entry-%d", 1999-round))
	}
	for i := 100; i < 1900; i++ {
		if name := fmt.Sprintf("entry-%d", i); !seen[name] && i%7 != 0 {
			t.Fatalf("%s never listed", name)
		}
	}
	fs.Close()
	mustClean(t, path)
}

// TestHugeSizeReads: a corrupt size far past what extents can map reads as
// a hole instead of looping.
func TestHugeSizeReads(t *testing.T) {
	path := newVolume(t, 64<<20)
	fs := openRW(t, path)
	f, _ := fs.Create(RootIno, "f", 0o644, Owner{})
	fs.WriteAt(f, []byte("data"), 0)
	n, _ := fs.getInode(f)
	n.raw.SetSize(1 << 62)
	buf := make([]byte, 8192)
	for _, off := range []int64{0, 1 << 44, 1<<62 - 100} {
		if _, err := fs.ReadAt(f, buf, off); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
}
