// Package fstree is the in-memory model of a flattened root filesystem.
//
// core/image produces a tree from OCI layers and core/erofs writes it to an
// image. The tree carries metadata only: the content of a regular file lives
// wherever the data sink put it while the layers were streamed, and Node.Data
// is the sink's handle for it. Hard links are two directory entries pointing
// at the same *Node.
package fstree

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// File type bits of Node.Mode, as in stat(2).
const (
	TypeMask    = unix.S_IFMT
	TypeRegular = unix.S_IFREG
	TypeDir     = unix.S_IFDIR
	TypeSymlink = unix.S_IFLNK
	TypeChar    = unix.S_IFCHR
	TypeBlock   = unix.S_IFBLK
	TypeFIFO    = unix.S_IFIFO
	TypeSocket  = unix.S_IFSOCK

	// PermMask covers the permission bits including setuid, setgid and
	// sticky.
	PermMask = 0o7777
)

// Timespec is a point in time with nanosecond precision, as stored on disk.
type Timespec struct {
	Sec  int64
	Nsec uint32
}

// Node is one inode of the tree.
type Node struct {
	// Mode holds the file type (Type* constants) and the permission bits.
	Mode uint32
	UID  uint32
	GID  uint32

	Mtime Timespec

	// Size is the length of a regular file's content. For other types it
	// is zero; a symlink's length is len(Target).
	Size int64

	// Data is the data sink's handle for a regular file's content.
	Data uint64

	// Rdev is the device number of a character or block device, as
	// unix.Mkdev encodes it.
	Rdev uint64

	// Target is a symlink's target.
	Target string

	// Xattrs are the extended attributes the layers gave this inode,
	// keyed by full name (for example "security.capability").
	Xattrs map[string]string

	// Children are a directory's entries, keyed by name. Nil for other
	// types; never contains "." or "..".
	Children map[string]*Node
}

// NewDir returns an empty directory with the given permissions.
func NewDir(perm uint32) *Node {
	return &Node{Mode: TypeDir | perm&PermMask, Children: make(map[string]*Node)}
}

// Type returns the file type bits of n.
func (n *Node) Type() uint32 { return n.Mode & TypeMask }

// IsDir reports whether n is a directory.
func (n *Node) IsDir() bool { return n.Type() == TypeDir }

// SortedNames returns the names of a directory's children in byte order,
// the order EROFS stores them in.
func (n *Node) SortedNames() []string {
	names := make([]string, 0, len(n.Children))
	for name := range n.Children {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Walk calls fn for every entry below root in depth-first, byte-sorted order,
// with the entry's slash-separated path relative to root ("" for root
// itself). A hard-linked node is visited once per path. If fn returns an
// error, Walk stops and returns it.
func Walk(root *Node, fn func(path string, n *Node) error) error {
	return walk("", root, fn)
}

func walk(path string, n *Node, fn func(string, *Node) error) error {
	if err := fn(path, n); err != nil {
		return err
	}
	if !n.IsDir() {
		return nil
	}
	for _, name := range n.SortedNames() {
		child := name
		if path != "" {
			child = path + "/" + name
		}
		if err := walk(child, n.Children[name], fn); err != nil {
			return err
		}
	}
	return nil
}

// Lookup returns the node at the slash-separated path below root, without
// following symlinks, or nil if there is none.
func Lookup(root *Node, path string) *Node {
	n := root
	for _, name := range strings.Split(strings.Trim(path, "/"), "/") {
		if name == "" {
			continue
		}
		if !n.IsDir() {
			return nil
		}
		if n = n.Children[name]; n == nil {
			return nil
		}
	}
	return n
}

// TypeName returns a short human name of a file type, for error messages.
func TypeName(mode uint32) string {
	switch mode & TypeMask {
	case TypeRegular:
		return "regular file"
	case TypeDir:
		return "directory"
	case TypeSymlink:
		return "symlink"
	case TypeChar:
		return "character device"
	case TypeBlock:
		return "block device"
	case TypeFIFO:
		return "fifo"
	case TypeSocket:
		return "socket"
	default:
		return fmt.Sprintf("unknown type %#o", mode&TypeMask)
	}
}
