package main

// What a battery case must not leave on the host or in the image cache.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// treeListing lists every path under root with its type, mode and size,
// to compare before and after a run.
func treeListing(root string) []string {
	var l []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			l = append(l, p+": "+err.Error())
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		l = append(l, fmt.Sprintf("%s %v %d", p, info.Mode(), size))
		return nil
	})
	slices.Sort(l)
	return l
}

// hostileFiles lists what under root no pull or failed run may leave on the
// host: device nodes, FIFOs, sockets, set-ID or world-writable files, and
// symlinks.
func hostileFiles(root string) []string {
	var bad []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		m := info.Mode()
		if m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeSymlink|fs.ModeSetuid|fs.ModeSetgid) != 0 || (!d.IsDir() && m.Perm()&0o002 != 0) {
			bad = append(bad, fmt.Sprintf("%s (%v)", p, m))
		}
		return nil
	})
	return bad
}

// cacheLeftovers lists what a failed pull left in the image cache at
// root that it should not have: anything in tmp/, an image directory
// without both its files, a refs.json that does not parse or names an
// image that is not there.
func cacheLeftovers(root string) []string {
	var bad []string
	tmp, _ := os.ReadDir(filepath.Join(root, "tmp"))
	for _, e := range tmp {
		bad = append(bad, "tmp/"+e.Name())
	}
	images, _ := os.ReadDir(filepath.Join(root, "images"))
	have := map[string]bool{}
	for _, e := range images {
		dir := filepath.Join(root, "images", e.Name())
		names, _ := os.ReadDir(dir)
		var files []string
		for _, n := range names {
			files = append(files, n.Name())
		}
		if !slices.Equal(files, []string{"image.json", "rootfs.erofs"}) {
			bad = append(bad, fmt.Sprintf("images/%s holds %q", e.Name(), files))
			continue
		}
		var meta struct{ Size int64 }
		b, err := os.ReadFile(filepath.Join(dir, "image.json"))
		st, serr := os.Stat(filepath.Join(dir, "rootfs.erofs"))
		if err != nil || json.Unmarshal(b, &meta) != nil || serr != nil || st.Size() != meta.Size {
			bad = append(bad, fmt.Sprintf("images/%s is incomplete", e.Name()))
			continue
		}
		have["sha256:"+e.Name()] = true
	}
	names, _ := os.ReadDir(root)
	for _, e := range names {
		switch n := e.Name(); {
		case n == "images" || n == "tmp" || n == "locks":
		case n == "refs.json":
			var refs struct {
				Refs map[string]string `json:"refs"`
			}
			b, err := os.ReadFile(filepath.Join(root, n))
			if err != nil || json.Unmarshal(b, &refs) != nil {
				bad = append(bad, "refs.json does not parse")
			}
			for ref, id := range refs.Refs {
				if !have[id] {
					bad = append(bad, fmt.Sprintf("refs.json names %s for %s, which is not cached", id, ref))
				}
			}
		default:
			bad = append(bad, n)
		}
	}
	return bad
}
