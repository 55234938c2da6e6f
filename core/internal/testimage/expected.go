package testimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/fstree"
	"z.gfire.dev/gvx/core/internal/treecheck"
)

// refInode is an inode of the reference model.
type refInode struct {
	e     Entry
	mode  uint32
	layer int // last layer that put or passed through this path
}

// Expected flattens layer specs with a deliberately naive model — a map
// from path to inode, rescanned for every whiteout — independent of
// core/image's tree-based flattener, and returns the listing the flattened
// image must have. It handles what the specs use: whiteouts and opaque
// markers hide lower layers only, hard links share inodes, missing parents
// appear as 0755 root-owned directories with time zero.
func Expected(specs [][]Entry) (treecheck.Listing, map[string]map[string]string) {
	paths := map[string]*refInode{"": {mode: fstree.TypeDir | 0o755}}
	layerOf := map[string]int{}
	for k, spec := range specs {
		layer := k + 1
		for _, e := range spec {
			p := strings.Trim(path.Clean("/"+e.Name), "/")
			base, dir := path.Base(p), parentOf(p)
			switch {
			case p == "":
				paths[""] = &refInode{e: e, mode: fstree.TypeDir | uint32(e.Mode)}
				continue
			case base == ".wh..wh..opq":
				for q := range paths {
					if isBelow(q, dir) && layerOf[q] < layer {
						delete(paths, q)
					}
				}
				continue
			case strings.HasPrefix(base, ".wh."):
				t := path.Join(dir, base[len(".wh."):])
				for q := range paths {
					if (q == t || isBelow(q, t)) && layerOf[q] < layer {
						delete(paths, q)
					}
				}
				continue
			}
			for a := dir; ; a = parentOf(a) {
				if _, ok := paths[a]; !ok {
					paths[a] = &refInode{mode: fstree.TypeDir | 0o755}
				}
				layerOf[a] = layer
				if a == "" {
					break
				}
			}
			layerOf[p] = layer
			if e.Type == tar.TypeLink {
				paths[p] = paths[strings.Trim(path.Clean("/"+e.Linkname), "/")]
				continue
			}
			in := &refInode{e: e, mode: typeOf(e.Type) | uint32(e.Mode)&fstree.PermMask}
			if old, ok := paths[p]; ok && old.mode&fstree.TypeMask == fstree.TypeDir && e.Type == tar.TypeDir {
				paths[p] = in
				continue
			}
			for q := range paths {
				if isBelow(q, p) {
					delete(paths, q)
				}
			}
			paths[p] = in
		}
	}

	// Listing order: depth first, byte order per component.
	order := make([]string, 0, len(paths))
	for p := range paths {
		order = append(order, p)
	}
	sort.Slice(order, func(i, j int) bool { return dfsLess(order[i], order[j]) })
	links := map[*refInode]int{}
	first := map[*refInode]string{}
	subdirs := map[string]uint32{}
	for _, p := range order {
		in := paths[p]
		links[in]++
		if _, ok := first[in]; !ok {
			first[in] = p
		}
		if p != "" && in.mode&fstree.TypeMask == fstree.TypeDir {
			subdirs[parentOf(p)]++
		}
	}
	l := treecheck.Listing{}
	xattrs := map[string]map[string]string{}
	for _, p := range order {
		in := paths[p]
		e := treecheck.Entry{
			Mode:  in.mode,
			UID:   uint32(in.e.UID),
			GID:   uint32(in.e.GID),
			Mtime: fstree.Timespec{Sec: in.e.Mtime.Unix(), Nsec: uint32(in.e.Mtime.Nanosecond())},
			Nlink: uint32(links[in]),
			Inode: first[in],
		}
		if in.e.Mtime.IsZero() {
			e.Mtime = fstree.Timespec{}
		}
		switch in.mode & fstree.TypeMask {
		case fstree.TypeRegular:
			sum := sha256.Sum256(in.e.Content)
			e.Digest, e.Size = hex.EncodeToString(sum[:]), int64(len(in.e.Content))
		case fstree.TypeSymlink:
			e.Target, e.Size = in.e.Linkname, int64(len(in.e.Linkname))
		case fstree.TypeChar, fstree.TypeBlock:
			e.Rdev = unix.Mkdev(uint32(in.e.Devmajor), uint32(in.e.Devminor))
		case fstree.TypeDir:
			e.Nlink = 2 + subdirs[p]
		}
		if len(in.e.Xattrs) > 0 && first[in] == p {
			xattrs[p] = in.e.Xattrs
		}
		l[p] = e
	}
	return l, xattrs
}

func parentOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i]
	}
	return ""
}

func isBelow(q, dir string) bool {
	if dir == "" {
		return q != ""
	}
	return strings.HasPrefix(q, dir+"/")
}

func dfsLess(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	if a == "" {
		return b != ""
	}
	if b == "" {
		return false
	}
	for i := 0; i < len(as) && i < len(bs); i++ {
		if as[i] != bs[i] {
			return as[i] < bs[i]
		}
	}
	return len(as) < len(bs)
}

func typeOf(flag byte) uint32 {
	switch flag {
	case tar.TypeDir:
		return fstree.TypeDir
	case tar.TypeSymlink:
		return fstree.TypeSymlink
	case tar.TypeChar:
		return fstree.TypeChar
	case tar.TypeBlock:
		return fstree.TypeBlock
	case tar.TypeFifo:
		return fstree.TypeFIFO
	}
	return fstree.TypeRegular
}
