package ext4lite

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// compareWithHost checks that the tree under ext4lite directory dir equals
// the host tree at hostDir: names, types, modes, owners, sizes, contents,
// link targets, device numbers, xattrs, link counts and hard-link identity.
// skip names entries at the top level to ignore (lost+found).
func compareWithHost(t *testing.T, fs *FS, dir Ino, hostDir string, skip ...string) int {
	t.Helper()
	hostInode := map[uint64]Ino{}
	count := 0
	var walk func(ino Ino, host, rel string)
	walk = func(ino Ino, host, rel string) {
		ents, err := os.ReadDir(host)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, e := range ents {
			if rel == "" && contains(skip, e.Name()) {
				continue
			}
			want = append(want, e.Name())
		}
		var got []string
		if err := fs.ReadDir(ino, 0, func(d Dirent) bool {
			if d.Name != "." && d.Name != ".." && !(rel == "" && contains(skip, d.Name)) {
				got = append(got, d.Name)
			}
			return true
		}); err != nil {
			t.Fatalf("%s: readdir: %v", rel, err)
		}
		sort.Strings(got)
		sort.Strings(want)
		if strings.Join(got, "/") != strings.Join(want, "/") {
			t.Fatalf("%s: %d entries, host has %d", rel, len(got), len(want))
		}
		for _, name := range want {
			p := filepath.Join(host, name)
			r := filepath.Join(rel, name)
			child, err := fs.Lookup(ino, name)
			if err != nil {
				t.Fatalf("%s: lookup: %v", r, err)
			}
			count++
			var hs syscall.Stat_t
			if err := syscall.Lstat(p, &hs); err != nil {
				t.Fatal(err)
			}
			st, err := fs.Stat(child)
			if err != nil {
				t.Fatalf("%s: stat: %v", r, err)
			}
			if st.Mode != hs.Mode || st.UID != hs.Uid || st.GID != hs.Gid {
				t.Fatalf("%s: mode %o %d:%d, host %o %d:%d", r, st.Mode, st.UID, st.GID, hs.Mode, hs.Uid, hs.Gid)
			}
			if hs.Mode&S_IFMT != S_IFDIR && st.Nlink != uint32(hs.Nlink) {
				t.Fatalf("%s: nlink %d, host %d", r, st.Nlink, hs.Nlink)
			}
			if st.Mtime.Sec != hs.Mtim.Sec {
				t.Fatalf("%s: mtime %v, host %v", r, st.Mtime, hs.Mtim)
			}
			if hs.Nlink > 1 && hs.Mode&S_IFMT != S_IFDIR {
				if prev, ok := hostInode[hs.Ino]; ok && prev != child {
					t.Fatalf("%s: hard link to inode %d, sibling has %d", r, child, prev)
				}
				hostInode[hs.Ino] = child
			}
			switch hs.Mode & S_IFMT {
			case S_IFDIR:
				walk(child, p, r)
			case S_IFREG:
				want, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(want)+1)
				n, err := fs.ReadAt(child, got, 0)
				if err != io.EOF || !bytes.Equal(got[:n], want) {
					t.Fatalf("%s: content differs (%d bytes, %v)", r, n, err)
				}
			case S_IFLNK:
				want, _ := os.Readlink(p)
				got, err := fs.Readlink(child)
				if err != nil || got != want {
					t.Fatalf("%s: link %q %v, host %q", r, got, err, want)
				}
			case S_IFCHR, S_IFBLK:
				if st.Rdev.Major != unix.Major(hs.Rdev) || st.Rdev.Minor != unix.Minor(hs.Rdev) {
					t.Fatalf("%s: rdev %v, host %d:%d", r, st.Rdev, unix.Major(hs.Rdev), unix.Minor(hs.Rdev))
				}
			}
			if err := compareXattrs(fs, child, p); err != nil {
				t.Fatalf("%s: %v", r, err)
			}
		}
	}
	walk(dir, hostDir, "")
	return count
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func compareXattrs(fs *FS, ino Ino, host string) error {
	buf := make([]byte, 1<<16)
	sz, err := unix.Llistxattr(host, buf)
	if err != nil {
		return err
	}
	var want []string
	for _, s := range strings.Split(string(buf[:sz]), "\x00") {
		if s != "" {
			want = append(want, s)
		}
	}
	got, err := fs.ListXattr(ino)
	if err != nil {
		return err
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("xattrs %q, host %q", got, want)
	}
	for _, name := range want {
		n, err := unix.Lgetxattr(host, name, buf)
		if err != nil {
			return err
		}
		v, err := fs.GetXattr(ino, name)
		if err != nil || !bytes.Equal(v, buf[:n]) {
			return fmt.Errorf("xattr %q: %v", name, err)
		}
	}
	return nil
}
