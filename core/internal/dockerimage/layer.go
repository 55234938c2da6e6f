package dockerimage

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Epoch is the modification time every layer entry is clamped to, so a
// rebuild of the same files gives the same bytes.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// writeLayer writes the tree under root as a gzip-compressed tar layer to
// dst: entries in lexical order, names relative to root, numeric owners
// only (root's when rootOwned), modification times clamped to Epoch, hard
// links as links to their first name, xattrs as PAX records. Sockets are
// left out.
func writeLayer(root, dst string, rootOwned bool) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	// BestSpeed: the layer is read once, by gvx's own EROFS conversion.
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	if err := addTree(tw, root, rootOwned); err != nil {
		return fmt.Errorf("writing the layer of %s: %w", root, err)
	}
	for _, c := range []io.Closer{tw, zw} {
		if err := c.Close(); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// inodeKey identifies a file on the host for hard link detection.
type inodeKey struct{ dev, ino uint64 }

// addTree adds every entry under root to tw. filepath.WalkDir visits in
// lexical order, which makes the output deterministic.
func addTree(tw *tar.Writer, root string, rootOwned bool) error {
	links := make(map[inodeKey]string)
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		return addEntry(tw, path, filepath.ToSlash(rel), rootOwned, links)
	})
}

// addEntry writes one file, directory, link or device.
func addEntry(tw *tar.Writer, path, name string, rootOwned bool, links map[inodeKey]string) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fmt.Errorf("lstat %s: %w", path, err)
	}
	hdr := &tar.Header{
		Name:    name,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: clamp(time.Unix(st.Mtim.Sec, st.Mtim.Nsec)),
		Format:  tar.FormatPAX,
	}
	if rootOwned {
		hdr.Uid, hdr.Gid = 0, 0
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case unix.S_IFREG:
		key := inodeKey{uint64(st.Dev), st.Ino}
		if first, ok := links[key]; ok && st.Nlink > 1 {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return tw.WriteHeader(hdr)
		}
		if st.Nlink > 1 {
			links[key] = name
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	case unix.S_IFLNK:
		target, err := os.Readlink(path)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	case unix.S_IFCHR, unix.S_IFBLK:
		hdr.Typeflag = tar.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
	default:
		return nil // sockets
	}
	xattrs, err := readXattrs(path)
	if err != nil {
		return err
	}
	for k, v := range xattrs {
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = make(map[string]string)
		}
		hdr.PAXRecords["SCHILY.xattr."+k] = v
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(tw, f)
	if err != nil {
		return fmt.Errorf("copying %s: %w", path, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("%s changed size while being archived", path)
	}
	return nil
}

// clamp returns t, or Epoch if t is later.
func clamp(t time.Time) time.Time {
	if t.After(Epoch) {
		return Epoch
	}
	return t.Truncate(time.Second)
}

// readXattrs returns path's extended attributes (without following a
// final symlink).
func readXattrs(path string) (map[string]string, error) {
	size, err := unix.Llistxattr(path, nil)
	if err != nil || size == 0 {
		if err == unix.ENOTSUP {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(path, buf)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string)
	for _, k := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if k == "" {
			continue
		}
		n, err := unix.Lgetxattr(path, k, nil)
		if err != nil {
			return nil, err
		}
		v := make([]byte, n)
		if n, err = unix.Lgetxattr(path, k, v); err != nil {
			return nil, err
		}
		out[k] = string(v[:n])
	}
	return out, nil
}
