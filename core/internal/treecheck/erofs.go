package treecheck

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
	gverofs "gvisor.dev/gvisor/pkg/erofs"

	"z.gfire.dev/gvx/core/fstree"
)

// FromErofs lists an EROFS image through gVisor's EROFS reader
// (gvisor.dev/gvisor/pkg/erofs), the code the Sentry mounts root
// filesystems with.
func FromErofs(path string) (Listing, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	img, err := gverofs.OpenImage(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("gVisor refuses the image: %w", err)
	}
	defer img.Close()
	l := make(Listing)
	first := make(map[uint64]string)
	var visit func(path string, nid uint64) error
	visit = func(path string, nid uint64) error {
		in, err := img.Inode(nid)
		if err != nil {
			return fmt.Errorf("%q (nid %d): %w", path, nid, err)
		}
		e := Entry{
			Mode:  uint32(in.Mode()),
			UID:   in.UID(),
			GID:   in.GID(),
			Mtime: fstree.Timespec{Sec: int64(in.Mtime()), Nsec: in.MtimeNsec()},
			Nlink: in.Nlink(),
		}
		if p, ok := first[nid]; ok {
			e.Inode = p
		} else {
			first[nid] = path
			e.Inode = path
		}
		switch {
		case in.IsRegular():
			ranges, err := in.DataRanges()
			if err != nil {
				return fmt.Errorf("%q: %w", path, err)
			}
			var readers []io.Reader
			for _, r := range ranges {
				readers = append(readers, bytes.NewReader(r.Bytes))
			}
			if e.Digest, e.Size, err = digest(io.MultiReader(readers...)); err != nil {
				return err
			}
			if _, err := in.DataOffset(); err != nil {
				return fmt.Errorf("%q: not mmap-able by gVisor: %w", path, err)
			}
		case in.IsSymlink():
			if e.Target, err = in.Readlink(); err != nil {
				return fmt.Errorf("%q: %w", path, err)
			}
			e.Size = int64(len(e.Target))
		case in.IsCharDev(), in.IsBlockDev():
			// gVisor does not expose i_rdev; it is the raw block
			// address of a flat-plain inode.
			off, err := in.DataOffset()
			if err != nil {
				return fmt.Errorf("%q: %w", path, err)
			}
			enc := uint32(off / uint64(img.BlockSize()))
			major := (enc & 0xfff00) >> 8
			minor := enc&0xff | (enc>>12)&0xfff00
			e.Rdev = unix.Mkdev(major, minor)
		case in.IsDir():
			var children []struct {
				name string
				nid  uint64
			}
			dots := 0
			err := in.IterDirents(func(name string, _ uint8, cnid uint64) error {
				switch name {
				case ".":
					dots++
					if cnid != nid {
						return fmt.Errorf(`"." points at nid %d, not %d`, cnid, nid)
					}
				case "..":
					dots++
				default:
					children = append(children, struct {
						name string
						nid  uint64
					}{name, cnid})
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("%q: %w", path, err)
			}
			if dots != 2 {
				return fmt.Errorf("%q: has %d of the entries . and ..", path, dots)
			}
			l[path] = e
			for _, c := range children {
				// Lookup must find every listed name (binary search over
				// the sorted blocks).
				got, err := in.Lookup(c.name)
				if err != nil || got != c.nid {
					return fmt.Errorf("%q: lookup of %q gave nid %d, %v; the listing says %d", path, c.name, got, err, c.nid)
				}
				child := c.name
				if path != "" {
					child = path + "/" + c.name
				}
				if err := visit(child, c.nid); err != nil {
					return err
				}
			}
			return nil
		}
		l[path] = e
		return nil
	}
	if err := visit("", img.RootNid()); err != nil {
		return nil, err
	}
	return l, nil
}
