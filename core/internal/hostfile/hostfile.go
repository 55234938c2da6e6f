// Package hostfile opens the host files a user names — volume images,
// snapshots, env files — so that naming the wrong kind of file is an error
// rather than a hang: open(2) of a FIFO waits for a writer, and a device's
// open may do anything. rungv catches SIGTERM and SIGINT to stop a sandbox,
// so a process blocked in such an open ignores them.
package hostfile

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Kinds is a set of file types Open accepts.
type Kinds uint8

const (
	// Regular is a regular file.
	Regular Kinds = 1 << iota
	// BlockDevice is a block device node.
	BlockDevice
)

// ErrKind matches (errors.Is) Open's and Check's error for a file of a
// kind they do not accept, a *KindError.
var ErrKind = errors.New("hostfile: not a file of an accepted kind")

// KindError is the error for a file of a kind not accepted.
type KindError struct {
	Path string
	Kind string // what the file is: "a named pipe (FIFO)"
	Want string // what was wanted: "a regular file"
}

func (e *KindError) Error() string {
	return fmt.Sprintf("%s is %s; only %s can be used here", e.Path, e.Kind, e.Want)
}

// Is makes errors.Is(err, ErrKind) hold.
func (e *KindError) Is(target error) bool { return target == ErrKind }

// Open opens path, following symlinks, with flag (os.O_RDONLY or
// os.O_RDWR, without os.O_CREATE), if it is of one of kinds. It checks the
// type before opening, opens without blocking, and checks that what it
// opened is the file it checked, so a file swapped in between cannot make
// it block either.
func Open(path string, flag int, kinds Kinds) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if err := check(path, st.Mode, kinds); err != nil {
		return nil, err
	}
	fd, err := open(path, flag|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var got unix.Stat_t
	if err := unix.Fstat(fd, &got); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if got.Dev != st.Dev || got.Ino != st.Ino {
		unix.Close(fd)
		return nil, fmt.Errorf("%s was replaced while it was being opened; try again", path)
	}
	if err := check(path, got.Mode, kinds); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// Regular files and block devices ignore O_NONBLOCK for I/O, but the
	// descriptor may be handed on: give it the usual blocking flags.
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl&^unix.O_NONBLOCK)
	}
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// CheckPath reports whether the file at path, following symlinks, is of
// one of kinds, without opening it: for checking what a user named before
// the work that opens it starts. The error is Open's for the same file.
func CheckPath(path string, kinds Kinds) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return check(path, st.Mode, kinds)
}

// Check reports whether the open file f is of one of kinds, for files a
// caller opened itself.
func Check(f *os.File, kinds Kinds) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return check(f.Name(), st.Mode, kinds)
}

func open(path string, flag int) (int, error) {
	for {
		fd, err := unix.Open(path, flag, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// check refuses mode unless its type is one of kinds.
func check(path string, mode uint32, kinds Kinds) error {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		if kinds&Regular != 0 {
			return nil
		}
	case unix.S_IFBLK:
		if kinds&BlockDevice != 0 {
			return nil
		}
	}
	want := "a regular file"
	if kinds&BlockDevice != 0 {
		want = "a regular file or a block device"
	}
	return &KindError{Path: path, Kind: describe(mode), Want: want}
}

// describe names mode's file type.
func describe(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a named pipe (FIFO)"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("a file of unknown type %#o", mode&unix.S_IFMT)
}
