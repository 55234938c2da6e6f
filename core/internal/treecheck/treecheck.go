// Package treecheck turns filesystem trees from different sources into one
// comparable listing, for tests: an expected tree, an EROFS image read
// through gVisor's EROFS implementation, and a host directory (for example
// what fsck.erofs --extract produced).
package treecheck

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/fstree"
)

// Entry is what a test compares about one path.
type Entry struct {
	Mode   uint32
	UID    uint32
	GID    uint32
	Mtime  fstree.Timespec
	Size   int64
	Rdev   uint64
	Target string
	Nlink  uint32
	// Digest is the SHA-256 of a regular file's content.
	Digest string
	// Inode is the smallest path sharing this entry's inode; hard links
	// have equal Inode values.
	Inode string
}

// Listing maps a slash-separated path relative to the root ("" is the root)
// to its entry.
type Listing map[string]Entry

// Ignore selects fields a source cannot represent faithfully.
type Ignore struct {
	DirMtime bool // e.g. extraction touched directories after filling them
	Rdev     bool
	// Hardlinks ignores link counts and inode identity of non-directories
	// (a tool that extracts hard links as copies).
	Hardlinks bool
	// SpecialBits ignores setuid, setgid and sticky bits.
	SpecialBits bool
}

// Diff returns human-readable differences between want and got, sorted by
// path; empty means equal.
func Diff(want, got Listing, ig Ignore) []string {
	var out []string
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			out = append(out, fmt.Sprintf("%q: missing", p))
			continue
		}
		if ig.DirMtime && w.Mode&fstree.TypeMask == fstree.TypeDir {
			g.Mtime = w.Mtime
		}
		if ig.Rdev {
			g.Rdev = w.Rdev
		}
		if ig.Hardlinks && w.Mode&fstree.TypeMask != fstree.TypeDir {
			g.Nlink, g.Inode = w.Nlink, w.Inode
		}
		if ig.SpecialBits {
			g.Mode = g.Mode&^0o7000 | w.Mode&0o7000
		}
		if w != g {
			out = append(out, fmt.Sprintf("%q:\n  want %+v\n  got  %+v", p, w, g))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			out = append(out, fmt.Sprintf("%q: unexpected", p))
		}
	}
	sort.Strings(out)
	return out
}

// FromTree lists an fstree, reading regular files' content through content.
func FromTree(root *fstree.Node, content func(n *fstree.Node) (io.Reader, error)) (Listing, error) {
	l := make(Listing)
	first := make(map[*fstree.Node]string)
	links := make(map[*fstree.Node]uint32)
	subdirs := make(map[*fstree.Node]uint32)
	err := fstree.Walk(root, func(path string, n *fstree.Node) error {
		links[n]++
		if _, ok := first[n]; !ok {
			first[n] = path
		}
		if n.IsDir() {
			for _, c := range n.Children {
				if c.IsDir() {
					subdirs[n]++
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = fstree.Walk(root, func(path string, n *fstree.Node) error {
		e := Entry{Mode: n.Mode, UID: n.UID, GID: n.GID, Mtime: n.Mtime, Rdev: n.Rdev, Target: n.Target, Nlink: links[n], Inode: first[n]}
		switch n.Type() {
		case fstree.TypeRegular:
			r, err := content(n)
			if err != nil {
				return fmt.Errorf("%q: %w", path, err)
			}
			if e.Digest, e.Size, err = digest(r); err != nil {
				return fmt.Errorf("%q: %w", path, err)
			}
		case fstree.TypeSymlink:
			e.Size = int64(len(n.Target))
		case fstree.TypeDir:
			e.Nlink = 2 + subdirs[n]
		}
		if n.Type() != fstree.TypeChar && n.Type() != fstree.TypeBlock {
			e.Rdev = 0
		}
		l[path] = e
		return nil
	})
	return l, err
}

// FromDir lists a host directory tree with lstat. Directory sizes are not
// compared (they depend on the host filesystem) and are left zero.
func FromDir(dir string) (Listing, error) {
	l := make(Listing)
	inodes := make(map[uint64]string)
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			rel = ""
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := Entry{
			Mode:  st.Mode,
			UID:   st.Uid,
			GID:   st.Gid,
			Mtime: fstree.Timespec{Sec: st.Mtim.Sec, Nsec: uint32(st.Mtim.Nsec)},
			Nlink: uint32(st.Nlink),
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			e.Digest, e.Size, err = digest(f)
			f.Close()
			if err != nil {
				return err
			}
		case unix.S_IFLNK:
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			e.Size = int64(len(e.Target))
		case unix.S_IFCHR, unix.S_IFBLK:
			e.Rdev = st.Rdev
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if prev, ok := inodes[st.Ino]; ok {
				e.Inode = prev
			} else {
				inodes[st.Ino] = rel
				e.Inode = rel
			}
		} else {
			e.Inode = rel
		}
		l[rel] = e
		return nil
	})
	return l, err
}

func digest(r io.Reader) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// Summary lists paths of a listing, one per line, for failure output.
func Summary(l Listing) string {
	paths := make([]string, 0, len(l))
	for p := range l {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	return strings.Join(paths, "\n")
}
