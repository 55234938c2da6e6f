package ext4lite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// mnode is the workload's model of one inode.
type mnode struct {
	ino    Ino
	mode   uint32
	uid    uint32
	gid    uint32
	data   []byte // regular file content
	target string
	rdev   Dev
	xattrs map[string][]byte
	kids   map[string]*mnode // directories
	parent *mnode            // directories
	nlink  int               // names pointing here (non-directories)
	mtime  *Timespec         // set by utimes
	idx    int               // position in workload.dirs or workload.files
}

func (n *mnode) isDir() bool { return n.mode&S_IFMT == S_IFDIR }

// workload drives random operations through ext4lite and keeps a model of
// what the tree must look like.
type workload struct {
	t      testing.TB
	fs     *FS
	rng    *rand.Rand
	root   *mnode
	dirs   []*mnode
	files  []*mnode
	ops    map[string]int
	failed map[string]int
	// allowNoSpace makes ENOSPC an expected outcome of any change.
	allowNoSpace bool
	// paranoid reads a file back after each change to its data.
	paranoid bool
}

// checkData reads regular file n back and compares it with the model.
func (w *workload) checkData(op string, n *mnode) {
	if !w.paranoid {
		return
	}
	w.t.Helper()
	got := make([]byte, len(n.data)+1)
	c, err := w.fs.ReadAt(n.ino, got, 0)
	if err != io.EOF || c != len(n.data) {
		w.t.Fatalf("op %d %s: read back %d of %d bytes: %v", w.total(), op, c, len(n.data), err)
	}
	for i := range n.data {
		if got[i] != n.data[i] {
			w.t.Fatalf("op %d %s: byte %d of %d differs", w.total(), op, i, len(n.data))
		}
	}
}

func newWorkload(t testing.TB, fs *FS, seed uint64) *workload {
	w := &workload{t: t, fs: fs, rng: rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)),
		ops: map[string]int{}, failed: map[string]int{}}
	w.root = &mnode{ino: RootIno, mode: S_IFDIR | 0o755, kids: map[string]*mnode{}, xattrs: map[string][]byte{}}
	w.root.parent = w.root
	w.addDir(w.root)
	lpf := &mnode{ino: 11, mode: S_IFDIR | 0o700, kids: map[string]*mnode{}, parent: w.root, xattrs: map[string][]byte{}}
	w.root.kids["lost+found"] = lpf
	w.addDir(lpf)
	return w
}

// newWorkloadAt makes a workload confined to directory dir.
func newWorkloadAt(t testing.TB, fs *FS, dir Ino, seed uint64) *workload {
	w := &workload{t: t, fs: fs, rng: rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15)),
		ops: map[string]int{}, failed: map[string]int{}}
	st, _ := fs.Stat(dir)
	w.root = &mnode{ino: dir, mode: st.Mode, kids: map[string]*mnode{}, xattrs: map[string][]byte{}}
	w.root.parent = w.root
	w.addDir(w.root)
	return w
}

func (w *workload) addDir(n *mnode)  { n.idx = len(w.dirs); w.dirs = append(w.dirs, n) }
func (w *workload) addFile(n *mnode) { n.idx = len(w.files); w.files = append(w.files, n) }

func (w *workload) removeDir(n *mnode) {
	last := w.dirs[len(w.dirs)-1]
	w.dirs[n.idx], last.idx = last, n.idx
	w.dirs = w.dirs[:len(w.dirs)-1]
}

func (w *workload) removeFile(n *mnode) {
	last := w.files[len(w.files)-1]
	w.files[n.idx], last.idx = last, n.idx
	w.files = w.files[:len(w.files)-1]
}

func (w *workload) randDir() *mnode { return w.dirs[w.rng.IntN(len(w.dirs))] }

func (w *workload) randName() string {
	switch w.rng.IntN(10) {
	case 0:
		return strings.Repeat("long", 64)[:1+w.rng.IntN(250)] + fmt.Sprint(w.rng.IntN(9))
	default:
		return fmt.Sprintf("n%d", w.rng.IntN(40))
	}
}

// randEntry picks a random (directory, name, node) with a node other than
// lost+found.
func (w *workload) randEntry(wantDir bool) (*mnode, string, *mnode) {
	for range 20 {
		d := w.randDir()
		if len(d.kids) == 0 {
			continue
		}
		names := make([]string, 0, len(d.kids))
		for k := range d.kids {
			names = append(names, k)
		}
		sort.Strings(names)
		name := names[w.rng.IntN(len(names))]
		n := d.kids[name]
		if n.isDir() != wantDir || name == "lost+found" && d == w.root {
			continue
		}
		return d, name, n
	}
	return nil, "", nil
}

func (w *workload) check(op string, err error) bool {
	w.t.Helper()
	if err != nil && w.allowNoSpace && errors.Is(err, unix.ENOSPC) {
		w.failed[op+"-nospc"]++
		return false
	}
	if err != nil {
		w.t.Fatalf("op %d %s: %v", w.total(), op, err)
	}
	w.ops[op]++
	return true
}

func (w *workload) expect(op string, err error, want unix.Errno) {
	w.t.Helper()
	if !errors.Is(err, want) {
		w.t.Fatalf("op %d %s: got %v, want %v", w.total(), op, err, want)
	}
	w.failed[op]++
}

func (w *workload) total() int {
	n := 0
	for _, v := range w.ops {
		n += v
	}
	for _, v := range w.failed {
		n += v
	}
	return n
}

func (w *workload) content(n int) []byte {
	b := make([]byte, n)
	seed := w.rng.Uint64()
	for i := 0; i < n; i += 8 {
		seed = seed*6364136223846793005 + 1442695040888963407
		for k := 0; k < 8 && i+k < n; k++ {
			b[i+k] = byte(seed >> (8 * k))
		}
	}
	return b
}

// step performs one random operation.
func (w *workload) step() {
	switch r := w.rng.IntN(100); {
	case r < 12:
		w.create()
	case r < 16:
		w.mkdir()
	case r < 34:
		w.write()
	case r < 40:
		w.truncate()
	case r < 50:
		w.rename()
	case r < 58:
		w.unlink()
	case r < 61:
		w.rmdir()
	case r < 65:
		w.link()
	case r < 69:
		w.symlink()
	case r < 72:
		w.mknod()
	case r < 82:
		w.xattr()
	case r < 88:
		w.setattr()
	case r < 92:
		w.fallocate()
	case r < 95:
		w.lookupMissing()
	case r < 97:
		w.check("sync", w.fs.Sync())
	default:
		w.rmdirNonEmpty()
	}
}

func (w *workload) create() {
	d, name := w.randDir(), w.randName()
	mode := uint32(0o600 + w.rng.IntN(0o200))
	ino, err := w.fs.Create(d.ino, name, mode, Owner{uint32(w.rng.IntN(3)) * 1000, 100})
	if _, exists := d.kids[name]; exists {
		w.expect("create", err, unix.EEXIST)
		return
	}
	if !w.check("create", err) {
		return
	}
	d.mtime = nil
	n := &mnode{ino: ino, mode: S_IFREG | mode, uid: 0, gid: 100, nlink: 1, xattrs: map[string][]byte{}}
	st, _ := w.fs.Stat(ino)
	n.uid = st.UID
	d.kids[name] = n
	w.addFile(n)
}

func (w *workload) mkdir() {
	d, name := w.randDir(), w.randName()
	ino, err := w.fs.Mkdir(d.ino, name, 0o755, Owner{0, 0})
	if _, exists := d.kids[name]; exists {
		w.expect("mkdir", err, unix.EEXIST)
		return
	}
	if !w.check("mkdir", err) {
		return
	}
	d.mtime = nil
	n := &mnode{ino: ino, mode: S_IFDIR | 0o755, kids: map[string]*mnode{}, parent: d, xattrs: map[string][]byte{}}
	d.kids[name] = n
	w.addDir(n)
}

func (w *workload) randFile(kind uint32) *mnode {
	for range 10 {
		if len(w.files) == 0 {
			return nil
		}
		n := w.files[w.rng.IntN(len(w.files))]
		if kind == 0 || n.mode&S_IFMT == kind {
			return n
		}
	}
	return nil
}

func (w *workload) write() {
	n := w.randFile(S_IFREG)
	if n == nil {
		return
	}
	var off, size int
	switch w.rng.IntN(10) {
	case 0:
		off, size = w.rng.IntN(8<<20), 1+w.rng.IntN(64<<10) // sparse
	case 1:
		off, size = len(n.data), 1+w.rng.IntN(1<<20) // big append
	case 2, 3, 4:
		off, size = len(n.data), 1+w.rng.IntN(9000) // append
	default:
		off, size = w.rng.IntN(len(n.data)+1), 1+w.rng.IntN(20000)
	}
	data := w.content(size)
	c, err := w.fs.WriteAt(n.ino, data, int64(off))
	if !w.check("write", err) {
		if c == 0 {
			return
		}
		data = data[:c] // a short write: what fit is written
	} else if c != size {
		w.t.Fatalf("short write %d of %d without an error", c, size)
	}
	if end := off + len(data); end > len(n.data) {
		n.data = append(n.data, make([]byte, end-len(n.data))...)
	}
	copy(n.data[off:], data)
	n.mtime = nil
	w.checkData(fmt.Sprintf("write %d+%d", off, len(data)), n)
}

func (w *workload) truncate() {
	n := w.randFile(S_IFREG)
	if n == nil {
		return
	}
	size := w.rng.IntN(len(n.data) + 20000)
	if w.rng.IntN(4) == 0 {
		size = 0
	}
	if !w.check("truncate", w.fs.Truncate(n.ino, int64(size))) {
		return
	}
	n.mtime = nil
	if size < len(n.data) {
		n.data = n.data[:size]
	} else {
		n.data = append(n.data, make([]byte, size-len(n.data))...)
	}
	w.checkData(fmt.Sprintf("truncate %d", size), n)
}

func (w *workload) fallocate() {
	n := w.randFile(S_IFREG)
	if n == nil || len(n.data) == 0 {
		return
	}
	off := w.rng.IntN(len(n.data))
	length := 1 + w.rng.IntN(len(n.data)-off+8192)
	n.mtime = nil
	switch w.rng.IntN(3) {
	case 0:
		if !w.check("punch", w.fs.Fallocate(n.ino, FallocPunchHole|FallocKeepSize, int64(off), int64(length))) {
			return
		}
		end := min(off+length, len(n.data))
		clear(n.data[off:end])
		w.checkData(fmt.Sprintf("punch %d+%d", off, length), n)
	case 1:
		if !w.check("fallocate", w.fs.Fallocate(n.ino, 0, int64(off), int64(length))) {
			return
		}
		if end := off + length; end > len(n.data) {
			n.data = append(n.data, make([]byte, end-len(n.data))...)
		}
		w.checkData(fmt.Sprintf("fallocate %d+%d", off, length), n)
	default:
		if !w.check("zero-range", w.fs.Fallocate(n.ino, FallocZeroRange|FallocKeepSize, int64(off), int64(length))) {
			return
		}
		end := min(off+length, len(n.data))
		clear(n.data[off:end])
		w.checkData(fmt.Sprintf("zero-range %d+%d", off, length), n)
	}
}

// isAncestor reports whether a is d or one of d's ancestors.
func isAncestor(a, d *mnode) bool {
	for {
		if d == a {
			return true
		}
		if d.parent == d {
			return false
		}
		d = d.parent
	}
}

func (w *workload) rename() {
	isDir := w.rng.IntN(4) == 0
	sd, sname, src := w.randEntry(isDir)
	if src == nil {
		return
	}
	dd, dname := w.randDir(), w.randName()
	if w.rng.IntN(3) == 0 {
		dd = sd
	}
	dst := dd.kids[dname]
	if dd == w.root && dname == "lost+found" {
		return
	}
	flags := uint32(0)
	switch w.rng.IntN(8) {
	case 0:
		flags = RenameNoReplace
	case 1:
		flags = RenameExchange
	case 2:
		flags = RenameWhiteout
	}
	err := w.fs.Rename(sd.ino, sname, dd.ino, dname, flags)
	switch {
	case flags&RenameExchange != 0 && dst == nil:
		w.expect("rename-exchange-missing", err, unix.ENOENT)
		return
	case flags&RenameNoReplace != 0 && dst != nil:
		w.expect("rename-noreplace", err, unix.EEXIST)
		return
	case src.isDir() && sd != dd && isAncestor(src, dd):
		w.expect("rename-into-self", err, unix.EINVAL)
		return
	case dst != nil && dst.isDir() && sd != dd && isAncestor(dst, sd):
		if flags&RenameExchange != 0 {
			w.expect("rename-exchange-into-self", err, unix.EINVAL)
		} else {
			w.expect("rename-over-ancestor", err, unix.ENOTEMPTY)
		}
		return
	case dst == src:
		w.check("rename-self", err)
		return
	case flags&RenameExchange == 0 && dst != nil && src.isDir() && !dst.isDir():
		w.expect("rename-dir-over-file", err, unix.ENOTDIR)
		return
	case flags&RenameExchange == 0 && dst != nil && !src.isDir() && dst.isDir():
		w.expect("rename-file-over-dir", err, unix.EISDIR)
		return
	case flags&RenameExchange == 0 && dst != nil && dst.isDir() && len(dst.kids) > 0:
		w.expect("rename-over-nonempty", err, unix.ENOTEMPTY)
		return
	}
	sd.mtime, dd.mtime = nil, nil
	if !w.check("rename", err) {
		return
	}
	if flags&RenameExchange != 0 {
		sd.kids[sname], dd.kids[dname] = dst, src
		if src.isDir() {
			src.parent = dd
		}
		if dst.isDir() {
			dst.parent = sd
		}
		w.ops["rename-exchange"]++
		return
	}
	if dst != nil {
		w.dropName(dst)
	}
	delete(sd.kids, sname)
	dd.kids[dname] = src
	if src.isDir() {
		src.parent = dd
	}
	if flags&RenameWhiteout != 0 {
		ino, err := w.fs.Lookup(sd.ino, sname)
		w.check("lookup-whiteout", err)
		wh := &mnode{ino: ino, mode: S_IFCHR, nlink: 1, xattrs: map[string][]byte{}}
		st, _ := w.fs.Stat(ino)
		wh.uid, wh.gid = st.UID, st.GID
		sd.kids[sname] = wh
		w.addFile(wh)
		w.ops["rename-whiteout"]++
	}
}

// dropName forgets one name of n (already removed from its directory).
func (w *workload) dropName(n *mnode) {
	if n.isDir() {
		w.removeDir(n)
		return
	}
	n.nlink--
	if n.nlink == 0 {
		w.removeFile(n)
	}
}

func (w *workload) unlink() {
	d, name, n := w.randEntry(false)
	if n == nil {
		return
	}
	w.check("unlink", w.fs.Unlink(d.ino, name))
	d.mtime = nil
	delete(d.kids, name)
	w.dropName(n)
}

func (w *workload) rmdir() {
	d, name, n := w.randEntry(true)
	if n == nil {
		return
	}
	err := w.fs.Rmdir(d.ino, name)
	if len(n.kids) > 0 {
		w.expect("rmdir-nonempty", err, unix.ENOTEMPTY)
		return
	}
	w.check("rmdir", err)
	d.mtime = nil
	delete(d.kids, name)
	w.dropName(n)
}

func (w *workload) rmdirNonEmpty() {
	d, name, n := w.randEntry(true)
	if n == nil || len(n.kids) == 0 {
		return
	}
	w.expect("rmdir-nonempty", w.fs.Rmdir(d.ino, name), unix.ENOTEMPTY)
}

func (w *workload) lookupMissing() {
	d := w.randDir()
	name := fmt.Sprintf("missing%d", w.rng.IntN(1000))
	_, err := w.fs.Lookup(d.ino, name)
	w.expect("lookup-missing", err, unix.ENOENT)
}

func (w *workload) link() {
	n := w.randFile(0)
	if n == nil {
		return
	}
	d, name := w.randDir(), w.randName()
	err := w.fs.Link(d.ino, name, n.ino)
	if _, exists := d.kids[name]; exists {
		w.expect("link", err, unix.EEXIST)
		return
	}
	if !w.check("link", err) {
		return
	}
	d.mtime = nil
	d.kids[name] = n
	n.nlink++
}

func (w *workload) symlink() {
	d, name := w.randDir(), w.randName()
	target := strings.Repeat("t/", 100)[:1+w.rng.IntN(150)]
	ino, err := w.fs.Symlink(d.ino, name, target, Owner{})
	if _, exists := d.kids[name]; exists {
		w.expect("symlink", err, unix.EEXIST)
		return
	}
	if !w.check("symlink", err) {
		return
	}
	d.mtime = nil
	n := &mnode{ino: ino, mode: S_IFLNK | 0o777, target: target, nlink: 1, xattrs: map[string][]byte{}}
	d.kids[name] = n
	w.addFile(n)
}

func (w *workload) mknod() {
	d, name := w.randDir(), w.randName()
	types := []uint32{S_IFIFO, S_IFCHR, S_IFBLK, S_IFSOCK, S_IFCHR}
	typ := types[w.rng.IntN(len(types))]
	rdev := Dev{uint32(w.rng.IntN(300)), uint32(w.rng.IntN(70000))}
	if typ == S_IFIFO || typ == S_IFSOCK {
		rdev = Dev{}
	}
	ino, err := w.fs.Mknod(d.ino, name, typ|0o640, rdev, Owner{})
	if _, exists := d.kids[name]; exists {
		w.expect("mknod", err, unix.EEXIST)
		return
	}
	if !w.check("mknod", err) {
		return
	}
	d.mtime = nil
	n := &mnode{ino: ino, mode: typ | 0o640, rdev: rdev, nlink: 1, xattrs: map[string][]byte{}}
	d.kids[name] = n
	w.addFile(n)
}

func (w *workload) randNode() *mnode {
	if w.rng.IntN(4) == 0 || len(w.files) == 0 {
		return w.randDir()
	}
	return w.files[w.rng.IntN(len(w.files))]
}

func (w *workload) xattr() {
	n := w.randNode()
	prefixes := []string{"user.", "trusted.", "security."}
	name := prefixes[w.rng.IntN(len(prefixes))] + fmt.Sprintf("a%d", w.rng.IntN(12))
	if t := n.mode & S_IFMT; t != S_IFREG && t != S_IFDIR && strings.HasPrefix(name, "user.") {
		return // Linux allows user.* on files and directories only; so does the Sentry
	}
	if w.rng.IntN(3) == 0 {
		if len(n.xattrs) > 0 && w.rng.IntN(4) > 0 {
			var names []string
			for k := range n.xattrs {
				names = append(names, k)
			}
			sort.Strings(names)
			name = names[w.rng.IntN(len(names))]
		}
		err := w.fs.RemoveXattr(n.ino, name)
		if _, ok := n.xattrs[name]; !ok {
			w.expect("removexattr", err, unix.ENODATA)
			return
		}
		w.check("removexattr", err)
		delete(n.xattrs, name)
		return
	}
	size := w.rng.IntN(40)
	if w.rng.IntN(5) == 0 {
		size = w.rng.IntN(1500)
	}
	value := w.content(size)
	err := w.fs.SetXattr(n.ino, name, value, 0)
	if errors.Is(err, unix.ENOSPC) {
		w.failed["setxattr-nospc"]++
		return
	}
	if !w.check("setxattr", err) {
		return
	}
	n.xattrs[name] = value
}

func (w *workload) setattr() {
	n := w.randNode()
	if n.mode&S_IFMT == S_IFLNK {
		return
	}
	var a SetAttr
	switch w.rng.IntN(3) {
	case 0:
		a.Mask, a.Mode = SetMode, uint32(w.rng.IntN(0o7777))
	case 1:
		a.Mask, a.UID, a.GID = SetUID|SetGID, uint32(w.rng.IntN(70000)), uint32(w.rng.IntN(70000))
	default:
		a.Mask = SetMtime | SetAtime
		a.Mtime = Timespec{Sec: int64(w.rng.IntN(1 << 33)), Nsec: int64(w.rng.IntN(1e9))}
		a.Atime = Timespec{Sec: int64(w.rng.IntN(1 << 31)), Nsec: int64(w.rng.IntN(1e9))}
	}
	w.check("setattr", w.fs.SetAttr(n.ino, a))
	if a.Mask&SetMode != 0 {
		n.mode = n.mode&S_IFMT | a.Mode
	}
	if a.Mask&SetUID != 0 {
		n.uid, n.gid = a.UID, a.GID
	}
	if a.Mask&SetMtime != 0 {
		mt := a.Mtime
		if w.fs.geo.inodeSize == 128 {
			// No extra fields: 32-bit seconds only.
			mt = Timespec{Sec: min(max(mt.Sec, disk.MinTime), disk.MaxTime)}
		}
		n.mtime = &mt
	}
}

// paths returns every path in the model ("" is the root) with its node.
func (w *workload) paths() map[string]*mnode {
	out := map[string]*mnode{}
	var walk func(p string, n *mnode)
	walk = func(p string, n *mnode) {
		out[p] = n
		for name, k := range n.kids {
			walk(filepath.Join(p, name), k)
		}
	}
	walk("", w.root)
	return out
}

// verifyFS compares the model with what ext4lite reports.
func (w *workload) verifyFS(fs *FS) {
	t := w.t
	t.Helper()
	for p, n := range w.paths() {
		st, err := fs.Stat(n.ino)
		if err != nil {
			t.Fatalf("%q: stat: %v", p, err)
		}
		if st.Mode != n.mode || st.UID != n.uid && n.mode&S_IFMT != S_IFDIR {
			t.Fatalf("%q: mode %o uid %d, want %o %d", p, st.Mode, st.UID, n.mode, n.uid)
		}
		if n.mtime != nil && st.Mtime != *n.mtime {
			t.Fatalf("%q: mtime %v, want %v", p, st.Mtime, *n.mtime)
		}
		switch n.mode & S_IFMT {
		case S_IFDIR:
			var names []string
			if err := fs.ReadDir(n.ino, 0, func(d Dirent) bool {
				if d.Name != "." && d.Name != ".." {
					names = append(names, d.Name)
				}
				return true
			}); err != nil {
				t.Fatalf("%q: readdir: %v", p, err)
			}
			var want []string
			for k := range n.kids {
				want = append(want, k)
			}
			sort.Strings(names)
			sort.Strings(want)
			if !slices.Equal(names, want) {
				t.Fatalf("%q: entries %q, want %q", p, names, want)
			}
			subdirs := 0
			for _, k := range n.kids {
				if k.isDir() {
					subdirs++
				}
			}
			if int(st.Nlink) != 2+subdirs {
				t.Fatalf("%q: nlink %d, want %d", p, st.Nlink, 2+subdirs)
			}
		case S_IFREG:
			if st.Size != uint64(len(n.data)) {
				t.Fatalf("%q: size %d, want %d", p, st.Size, len(n.data))
			}
			got := make([]byte, len(n.data))
			if _, err := fs.ReadAt(n.ino, got, 0); err != nil && err != io.EOF {
				t.Fatalf("%q: read: %v", p, err)
			}
			if !bytes.Equal(got, n.data) {
				t.Fatalf("%q: content differs", p)
			}
		case S_IFLNK:
			target, err := fs.Readlink(n.ino)
			if err != nil || target != n.target {
				t.Fatalf("%q: readlink %q %v, want %q", p, target, err, n.target)
			}
		case S_IFCHR, S_IFBLK:
			if st.Rdev != n.rdev {
				t.Fatalf("%q: rdev %v, want %v", p, st.Rdev, n.rdev)
			}
		}
		if !n.isDir() && int(st.Nlink) != n.nlink {
			t.Fatalf("%q: nlink %d, want %d", p, st.Nlink, n.nlink)
		}
		names, err := fs.ListXattr(n.ino)
		if err != nil {
			t.Fatalf("%q: listxattr: %v", p, err)
		}
		if len(names) != len(n.xattrs) {
			t.Fatalf("%q: xattrs %q, want %d", p, names, len(n.xattrs))
		}
		for k, v := range n.xattrs {
			got, err := fs.GetXattr(n.ino, k)
			if err != nil || !bytes.Equal(got, v) {
				t.Fatalf("%q: xattr %q: %v", p, k, err)
			}
		}
	}
}

// hostCheck selects what verifyHost compares.
type hostCheck struct {
	special   bool // devices, FIFOs and sockets exist on the host
	hardlinks bool // hard links share inodes on the host
	xattrs    bool
	owners    bool
}

// verifyHost compares the model with a host directory tree (an rdump
// output or a mount point).
func (w *workload) verifyHost(dir string, hc hostCheck) {
	t := w.t
	t.Helper()
	want := w.paths()
	seen := map[string]bool{}
	inodes := map[*mnode]uint64{}
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "." {
			rel = ""
		}
		n, ok := want[rel]
		if !ok {
			return fmt.Errorf("%q exists but the model has no such path", rel)
		}
		seen[rel] = true
		st := info.Sys().(*syscall.Stat_t)
		typ := st.Mode & S_IFMT
		if typ != n.mode&S_IFMT {
			return fmt.Errorf("%q: type %o, want %o", rel, typ, n.mode&S_IFMT)
		}
		mask := uint32(0o777)
		if hc.owners {
			mask = permMask // rdump drops setuid, setgid and sticky
		}
		if typ != S_IFLNK && st.Mode&mask != n.mode&mask && rel != "" {
			return fmt.Errorf("%q: mode %o, want %o", rel, st.Mode, n.mode)
		}
		if hc.owners && rel != "" && st.Uid != n.uid {
			return fmt.Errorf("%q: uid %d, want %d", rel, st.Uid, n.uid)
		}
		switch typ {
		case S_IFREG:
			got, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.Equal(got, n.data) {
				return fmt.Errorf("%q: content differs (%d bytes, want %d)", rel, len(got), len(n.data))
			}
		case S_IFLNK:
			got, err := os.Readlink(path)
			if err != nil || got != n.target {
				return fmt.Errorf("%q: link %q %v, want %q", rel, got, err, n.target)
			}
		case S_IFCHR, S_IFBLK:
			if unix.Major(uint64(st.Rdev)) != n.rdev.Major || unix.Minor(uint64(st.Rdev)) != n.rdev.Minor {
				return fmt.Errorf("%q: rdev %d:%d, want %v", rel, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), n.rdev)
			}
		}
		if hc.hardlinks && !n.isDir() {
			if int(st.Nlink) != n.nlink {
				return fmt.Errorf("%q: nlink %d, want %d", rel, st.Nlink, n.nlink)
			}
			if prev, ok := inodes[n]; ok && prev != st.Ino {
				return fmt.Errorf("%q: hard link has inode %d, sibling %d", rel, st.Ino, prev)
			}
			inodes[n] = st.Ino
		}
		if hc.xattrs {
			if err := compareHostXattrs(path, n); err != nil {
				return fmt.Errorf("%q: %w", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, n := range want {
		if seen[p] {
			continue
		}
		if !hc.special && n.mode&S_IFMT != S_IFREG && n.mode&S_IFMT != S_IFDIR && n.mode&S_IFMT != S_IFLNK {
			continue
		}
		t.Fatalf("%q is missing on the host", p)
	}
}

func compareHostXattrs(path string, n *mnode) error {
	buf := make([]byte, 1<<16)
	sz, err := unix.Llistxattr(path, buf)
	if err != nil {
		return fmt.Errorf("listxattr: %w", err)
	}
	var names []string
	for _, s := range strings.Split(string(buf[:sz]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	if len(names) != len(n.xattrs) {
		return fmt.Errorf("xattrs %q, want %d", names, len(n.xattrs))
	}
	for k, v := range n.xattrs {
		sz, err := unix.Lgetxattr(path, k, buf)
		if err != nil || !bytes.Equal(buf[:sz], v) {
			return fmt.Errorf("xattr %q differs (%v)", k, err)
		}
	}
	return nil
}
