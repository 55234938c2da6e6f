// Package hosttar writes a host directory tree as the tar stream a
// sandbox's CopyIn extracts: the SDK's UploadDir sends it over the control
// connection, and `rungv run --copy` hands it to the Sentry before the
// command starts. Both copy the same things the same way: regular files
// with their permission bits, set-user-ID, set-group-ID and sticky bits and
// modification times, symlinks as symlinks (never followed), hard links
// within the tree as hard links, and a file's holes as holes, found with
// SEEK_DATA and SEEK_HOLE and not sent. A device, FIFO or socket has no
// place in such a copy and is refused.
package hosttar

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"z.gfire.dev/gvx/core/internal/sparsetar"
)

// UnsupportedError is a tree entry that is not a regular file, a
// directory or a symlink.
type UnsupportedError struct {
	Path string
	Type fs.FileMode
}

// Error implements error.
func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s is a %s, not a regular file, directory or symlink", e.Path, typeName(e.Type))
}

// typeName names a file type as ls -l's reader knows it.
func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "FIFO"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeCharDevice != 0:
		return "character device"
	case t&fs.ModeDevice != 0:
		return "block device"
	}
	return t.String()
}

// Check walks dir for what Write would refuse: an entry of another type
// (*UnsupportedError), or a directory it cannot read. It lets a caller
// refuse a tree before any of it is copied; only a file that changes or
// fails to read while it is written can still leave a copy partial.
func Check(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if t := d.Type(); !t.IsDir() && !t.IsRegular() && t&fs.ModeSymlink == 0 {
			return &UnsupportedError{p, t}
		}
		return nil
	})
}

// Write writes dir's tree to w, names relative to dir (dir itself is
// "./"). A file's other names in the tree become hard links to its first,
// and a file with holes (fewer blocks than its size needs) travels as a
// sparse entry.
func Write(dir string, w io.Writer) error {
	tw := sparsetar.NewWriter(w)
	links := map[fileID]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: tarMode(info.Mode()), ModTime: info.ModTime(), Format: tar.FormatPAX}
		st, _ := info.Sys().(*syscall.Stat_t)
		switch {
		case info.IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case info.Mode().IsRegular():
			if st != nil && st.Nlink > 1 {
				id := fileID{st.Dev, st.Ino}
				if first, ok := links[id]; ok {
					hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
					break
				}
				links[id] = hdr.Name
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
			return writeFile(tw, hdr, p, st)
		case info.Mode()&os.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return &UnsupportedError{p, info.Mode().Type()}
		}
		return tw.WriteHeader(hdr)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// fileID names a host file whatever its names.
type fileID struct{ dev, ino uint64 }

// tarMode returns the tar mode bits of m: permissions, set-user-ID,
// set-group-ID and sticky.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	for bit, tarBit := range map[fs.FileMode]int64{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if m&bit != 0 {
			mode |= tarBit
		}
	}
	return mode
}

// writeFile writes the regular file p, of header hdr and stat st, to tw.
func writeFile(tw *sparsetar.Writer, hdr *tar.Header, p string, st *syscall.Stat_t) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	data := []sparsetar.Segment{{Off: 0, Len: hdr.Size}}
	if st != nil && st.Blocks*512 < hdr.Size {
		if data, err = sparsetar.FileData(f, hdr.Size); err != nil {
			return err
		}
	}
	if err := tw.WriteFileHeader(hdr, data); err != nil {
		return err
	}
	for _, s := range data {
		if n, err := io.Copy(tw, io.NewSectionReader(f, s.Off, s.Len)); err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		} else if n != s.Len {
			return fmt.Errorf("%s changed size while it was copied", p)
		}
	}
	return nil
}
