package erofs

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/fstree"
	"z.gfire.dev/gvx/core/internal/sparsetar"
	"z.gfire.dev/gvx/core/internal/treecheck"
)

// builder assembles a tree and its content for tests, remembering every
// file's bytes so listings can be compared.
type builder struct {
	t       *testing.T
	w       *Writer
	root    *fstree.Node
	content map[uint64]func() io.Reader
}

func newBuilder(t *testing.T, f *os.File) *builder {
	root := fstree.NewDir(0o755)
	root.Mtime = fstree.Timespec{Sec: 1700000000, Nsec: 5}
	return &builder{t: t, w: NewWriter(f), root: root, content: make(map[uint64]func() io.Reader)}
}

func (b *builder) dir(path string, perm uint32) *fstree.Node {
	parent, name := b.parent(path)
	n := fstree.NewDir(perm)
	n.UID, n.GID = 1000, 1001
	n.Mtime = fstree.Timespec{Sec: 1600000000, Nsec: 123456789}
	parent.Children[name] = n
	return n
}

func (b *builder) parent(path string) (*fstree.Node, string) {
	dir, name := filepath.Split(path)
	p := fstree.Lookup(b.root, dir)
	if p == nil {
		b.t.Fatalf("no parent for %q", path)
	}
	return p, name
}

// file adds a regular file whose content open returns (called twice: once
// to write, once to compare).
func (b *builder) file(path string, mode uint32, size int64, open func() io.Reader) *fstree.Node {
	h, err := b.w.AddFile(open(), size)
	if err != nil {
		b.t.Fatalf("AddFile %q: %v", path, err)
	}
	b.content[h] = func() io.Reader { return io.LimitReader(open(), size) }
	n := &fstree.Node{Mode: fstree.TypeRegular | mode, UID: 7, GID: 8, Size: size, Data: h,
		Mtime: fstree.Timespec{Sec: 1500000000 + int64(len(path)), Nsec: uint32(len(path))}}
	if path != "" {
		parent, name := b.parent(path)
		parent.Children[name] = n
	}
	return n
}

func (b *builder) bytes(path string, data []byte) *fstree.Node {
	return b.file(path, 0o644, int64(len(data)), func() io.Reader { return bytes.NewReader(data) })
}

func (b *builder) node(path string, n *fstree.Node) {
	parent, name := b.parent(path)
	parent.Children[name] = n
}

func (b *builder) finish() Stats {
	stats, err := b.w.Finish(b.root, Options{BuildTime: fstree.Timespec{Sec: 1, Nsec: 2}, VolumeName: "gvx-test"})
	if err != nil {
		b.t.Fatalf("Finish: %v", err)
	}
	return stats
}

func (b *builder) listing() treecheck.Listing {
	l, err := treecheck.FromTree(b.root, func(n *fstree.Node) (io.Reader, error) {
		return b.content[n.Data](), nil
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return l
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func tempImage(t *testing.T) *os.File {
	f, err := os.Create(filepath.Join(t.TempDir(), "test.erofs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// fsckErofs runs erofs-utils' checker and, when extract is set, extracts the
// image there preserving owners and permissions.
func fsckErofs(t *testing.T, image, extract string) {
	t.Helper()
	if _, err := exec.LookPath("fsck.erofs"); err != nil {
		t.Skip("fsck.erofs not installed (apt-get install erofs-utils; make test installs it)")
	}
	args := []string{image}
	if extract != "" {
		args = []string{"--extract=" + extract, "--preserve", image}
	}
	out, err := exec.Command("fsck.erofs", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("fsck.erofs %v: %v\n%s", args, err, out)
	}
}

func TestWriterRoundTrip(t *testing.T) {
	f := tempImage(t)
	b := newBuilder(t, f)
	rng := rand.New(rand.NewSource(1))
	random := func(n int) []byte {
		p := make([]byte, n)
		rng.Read(p)
		return p
	}
	b.bytes("empty", nil)
	b.bytes("small", []byte("hello\n"))
	b.bytes("block", random(BlockSize))
	b.bytes("block+1", random(BlockSize+1))
	big := b.bytes("big", random(3<<20+17))
	b.dir("etc", 0o755)
	b.dir("tmp", 0o1777)
	suid := b.bytes("etc/suid", []byte("#!/bin/sh\n"))
	suid.Mode = fstree.TypeRegular | 0o4755
	sgid := b.bytes("etc/sgid", []byte("x"))
	sgid.Mode = fstree.TypeRegular | 0o2711
	sgid.UID, sgid.GID = 70000, 80000 // needs 32-bit ids
	b.node("etc/hardlink", big)
	b.node("hardlink-2", big)
	b.node("link", &fstree.Node{Mode: fstree.TypeSymlink | 0o777, Target: "etc/suid"})
	b.node("long-link", &fstree.Node{Mode: fstree.TypeSymlink | 0o777, Target: strings.Repeat("x/", 2040)})
	b.node("null", &fstree.Node{Mode: fstree.TypeChar | 0o666, Rdev: unix.Mkdev(1, 3)})
	b.node("bigdev", &fstree.Node{Mode: fstree.TypeBlock | 0o600, Rdev: unix.Mkdev(259, 70000)})
	b.node("fifo", &fstree.Node{Mode: fstree.TypeFIFO | 0o600})
	b.node("sock", &fstree.Node{Mode: fstree.TypeSocket | 0o755})
	// Names sorting before "." and long names.
	b.bytes("-dash", []byte("d"))
	b.bytes("+plus", []byte("p"))
	b.bytes(strings.Repeat("n", 255), []byte("long name"))
	// A 3,000-entry directory spans many directory blocks.
	d := b.dir("many", 0o700)
	for i := range 3000 {
		d.Children[fmt.Sprintf("entry-%05d-%s", i, strings.Repeat("z", i%40))] = &fstree.Node{
			Mode: fstree.TypeRegular | 0o600, Size: 0}
		h, _ := b.w.AddFile(bytes.NewReader(nil), 0)
		b.content[h] = func() io.Reader { return bytes.NewReader(nil) }
		d.Children[fmt.Sprintf("entry-%05d-%s", i, strings.Repeat("z", i%40))].Data = h
	}
	// A sparse file: data, a long hole, data.
	sparse := append(append(random(5000), make([]byte, 64*BlockSize)...), random(100)...)
	b.bytes("sparse", sparse)
	stats := b.finish()
	t.Logf("stats: %+v", stats)

	want := b.listing()
	got, err := treecheck.FromErofs(f.Name())
	if err != nil {
		t.Fatalf("reading the image through gVisor: %v", err)
	}
	if diff := treecheck.Diff(want, got, treecheck.Ignore{}); len(diff) > 0 {
		t.Fatalf("gVisor's reading of the image differs:\n%s", strings.Join(diff, "\n"))
	}

	// The zero run stays a hole in the host file.
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 >= st.Size {
		t.Errorf("image allocates %d bytes for %d bytes of length; the zero run should be a hole", st.Blocks*512, st.Size)
	}

	dir := filepath.Join(t.TempDir(), "x")
	fsckErofs(t, f.Name(), dir)
	if os.Geteuid() != 0 {
		t.Log("not root: skipping the comparison of fsck.erofs --extract (it cannot preserve owners or make devices)")
		return
	}
	host, err := treecheck.FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// erofs-utils 1.5 extracts hard links as copies, drops setuid, setgid
	// and sticky bits, and sets directory times before filling them;
	// gVisor's reading above checks those.
	ig := treecheck.Ignore{DirMtime: true, Hardlinks: true, SpecialBits: true}
	if diff := treecheck.Diff(want, host, ig); len(diff) > 0 {
		t.Fatalf("fsck.erofs --extract differs:\n%s", strings.Join(diff, "\n"))
	}
}

// TestWriterHugeSparse writes a file over 4 GiB that is mostly a hole.
func TestWriterHugeSparse(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: reads 5 GiB of zeros")
	}
	f := tempImage(t)
	b := newBuilder(t, f)
	const size = 5<<30 + 123
	tailData := []byte("the end")
	open := func() io.Reader {
		return io.MultiReader(io.LimitReader(zeroReader{}, size-int64(len(tailData))), bytes.NewReader(tailData))
	}
	b.file("huge", 0o644, size, open)
	b.finish()
	checkSparseImage(t, b, f, 1<<20, "a 5 GiB hole")
}

// checkSparseImage checks that the image in f, finished by b, reads back as
// b's tree through gVisor and fsck.erofs, and allocates at most maxBytes on
// the host (what is described by what).
func checkSparseImage(t *testing.T, b *builder, f *os.File, maxBytes int64, what string) {
	t.Helper()
	got, err := treecheck.FromErofs(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if diff := treecheck.Diff(b.listing(), got, treecheck.Ignore{}); len(diff) > 0 {
		t.Fatalf("differs:\n%s", strings.Join(diff, "\n"))
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > maxBytes {
		t.Errorf("%s allocates %d bytes", what, st.Blocks*512)
	}
	fsckErofs(t, f.Name(), "")
}

// TestWriterCompaction replaces content after writing it, as later layers
// do, and checks the dead blocks are squeezed out with the result equal to
// writing only the live files.
func TestWriterCompaction(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	var files [][]byte
	for range 40 {
		n := rng.Intn(5 * BlockSize)
		if rng.Intn(4) == 0 {
			n = 0
		}
		p := make([]byte, n)
		rng.Read(p)
		if rng.Intn(3) == 0 && n > 2*BlockSize {
			clear(p[BlockSize : 2*BlockSize]) // a hole to carry across the move
		}
		files = append(files, p)
	}
	// The last file ends in zero blocks that were never written: moving
	// it must read them back as zeros.
	files = append(files, append([]byte("tail"), make([]byte, 3*BlockSize)...))
	live := func(i int) bool { return i%3 != 0 || i == len(files)-1 }

	// Image 1: write all, keep only the live ones in the tree.
	f1 := tempImage(t)
	b1 := newBuilder(t, f1)
	for i, p := range files {
		n := b1.bytes(fmt.Sprintf("f%02d", i), p)
		if !live(i) {
			delete(b1.root.Children, fmt.Sprintf("f%02d", i))
			_ = n
		}
	}
	stats := b1.finish()
	if stats.DeadBlocks == 0 || stats.MovedBlocks == 0 {
		t.Fatalf("expected dead and moved blocks, got %+v", stats)
	}
	// Image 2: write only the live ones.
	f2 := tempImage(t)
	b2 := newBuilder(t, f2)
	for i, p := range files {
		if live(i) {
			b2.bytes(fmt.Sprintf("f%02d", i), p)
		}
	}
	b2.finish()
	if sum(t, f1.Name()) != sum(t, f2.Name()) {
		t.Fatalf("compacted image differs from an image written without the dead files")
	}
	got, err := treecheck.FromErofs(f1.Name())
	if err != nil {
		t.Fatal(err)
	}
	if diff := treecheck.Diff(b2.listing(), got, treecheck.Ignore{}); len(diff) > 0 {
		t.Fatalf("differs:\n%s", strings.Join(diff, "\n"))
	}
	fsckErofs(t, f1.Name(), "")
}

func TestWriterDeterministic(t *testing.T) {
	build := func() string {
		f := tempImage(t)
		b := newBuilder(t, f)
		b.dir("a", 0o755)
		for i := range 200 {
			b.bytes(fmt.Sprintf("a/%d", i), bytes.Repeat([]byte{byte(i)}, i*37))
		}
		b.node("a/l", &fstree.Node{Mode: fstree.TypeSymlink | 0o777, Target: "0"})
		b.finish()
		return sum(t, f.Name())
	}
	if a, b := build(), build(); a != b {
		t.Fatalf("two builds differ: %s vs %s", a, b)
	}
}

func TestWriterRejects(t *testing.T) {
	cases := []struct {
		name string
		node *fstree.Node
		want string
	}{
		{"empty-link", &fstree.Node{Mode: fstree.TypeSymlink | 0o777}, "symlink target length"},
		{"dev", &fstree.Node{Mode: fstree.TypeChar, Rdev: unix.Mkdev(5000, 1)}, "does not fit"},
		{"handle", &fstree.Node{Mode: fstree.TypeRegular, Data: 99}, "not returned by AddFile"},
		{strings.Repeat("x", 256), &fstree.Node{Mode: fstree.TypeFIFO}, "file name is 256 bytes"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			w := NewWriter(tempImage(t))
			root := fstree.NewDir(0o755)
			root.Children[c.name] = c.node
			if _, err := w.Finish(root, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
	t.Run("short-content", func(t *testing.T) {
		w := NewWriter(tempImage(t))
		if _, err := w.AddFile(strings.NewReader("abc"), 10); err == nil || !strings.Contains(err.Error(), "7 bytes early") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("dir-hardlink", func(t *testing.T) {
		w := NewWriter(tempImage(t))
		root := fstree.NewDir(0o755)
		d := fstree.NewDir(0o755)
		root.Children["a"], root.Children["b"] = d, d
		if _, err := w.Finish(root, Options{}); err == nil || !strings.Contains(err.Error(), "cannot be hard links") {
			t.Fatalf("got %v", err)
		}
	})
}

func sum(t *testing.T, path string) string {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// TestWriterOnWriteback checks the hook the image cache flushes by runs
// once per writeback chunk, including for content written as holes.
func TestWriterOnWriteback(t *testing.T) {
	f := tempImage(t)
	b := newBuilder(t, f)
	calls := 0
	b.w.OnWriteback(func() { calls++ })
	rng := rand.New(rand.NewSource(3))
	data := make([]byte, writebackChunk+writebackChunk/2)
	rng.Read(data)
	b.bytes("a", data)
	if calls != 1 {
		t.Fatalf("after %d bytes: %d calls, want 1", len(data), calls)
	}
	b.file("zeros", 0o644, writebackChunk, func() io.Reader { return io.LimitReader(zeroReader{}, writebackChunk) })
	if calls != 2 {
		t.Fatalf("after %d more bytes of zeros: %d calls, want 2", writebackChunk, calls)
	}
	b.finish()
}

// sparseContent is a file of size bytes holding data at each segment, the
// rest zeros: what AddSparseFile reads (the data) and what the image must
// read back (all of it).
type sparseContent struct {
	size int64
	segs []sparsetar.Segment
	data [][]byte
}

func (c sparseContent) data1() io.Reader {
	var rs []io.Reader
	for _, d := range c.data {
		rs = append(rs, bytes.NewReader(d))
	}
	return io.MultiReader(rs...)
}

func (c sparseContent) all() io.Reader {
	var rs []io.Reader
	var at int64
	for i, s := range c.segs {
		rs = append(rs, io.LimitReader(zeroReader{}, s.Off-at), bytes.NewReader(c.data[i]))
		at = s.Off + s.Len
	}
	return io.MultiReader(append(rs, io.LimitReader(zeroReader{}, c.size-at))...)
}

func newSparse(size int64, offs ...int64) sparseContent {
	c := sparseContent{size: size}
	for i, off := range offs {
		d := random(1000 + 3000*i)
		if off+int64(len(d)) > size {
			d = d[:size-off]
		}
		c.segs = append(c.segs, sparsetar.Segment{Off: off, Len: int64(len(d))})
		c.data = append(c.data, d)
	}
	return c
}

func (b *builder) sparse(path string, c sparseContent) {
	h, err := b.w.AddSparseFile(c.data1(), c.size, c.segs)
	if err != nil {
		b.t.Fatalf("AddSparseFile %q: %v", path, err)
	}
	b.content[h] = c.all
	parent, name := b.parent(path)
	parent.Children[name] = &fstree.Node{Mode: fstree.TypeRegular | 0o644, Size: c.size, Data: h}
}

// TestWriterSparseFiles writes files as data segments at offsets, the rest
// holes, moves them in compaction, and reads them back through gVisor.
func TestWriterSparseFiles(t *testing.T) {
	f := tempImage(t)
	b := newBuilder(t, f)
	b.bytes("dead", random(3*BlockSize))
	const M = 1 << 20
	b.sparse("unaligned", newSparse(3*M+17, 5, 70000, 3*M+10))
	b.sparse("aligned", newSparse(8*M, 0, 4*M, 8*M-BlockSize))
	b.sparse("hole", newSparse(5*M))
	b.sparse("empty", newSparse(0))
	b.sparse("shared-block", newSparse(BlockSize, 0, 1500))
	b.bytes("after", random(5000))
	delete(b.root.Children, "dead")
	stats := b.finish()
	if stats.DeadBlocks == 0 || stats.MovedBlocks == 0 {
		t.Fatalf("expected dead and moved blocks, got %+v", stats)
	}
	checkSparseImage(t, b, f, 2*M, "16 MiB of mostly holes")
}

// TestWriterSparseTiBMoved moves a file claiming 1 TiB, all holes but a
// few KiB, in compaction: its holes are never read.
func TestWriterSparseTiBMoved(t *testing.T) {
	f := tempImage(t)
	b := newBuilder(t, f)
	b.bytes("dead", random(BlockSize))
	const T = 1 << 40
	c := newSparse(T, 0, T/2+3, T-100)
	b.sparse("huge", c)
	delete(b.root.Children, "dead")
	start := time.Now()
	stats := b.finish()
	t.Logf("Finish moved %d blocks of a 1 TiB sparse file in %v", stats.MovedBlocks, time.Since(start))
	// The data, and a little of the holes, read back through the image.
	got := make([]byte, 8192)
	for i, s := range c.segs {
		if _, err := f.ReadAt(got[:s.Len], BlockSize+s.Off); err != nil || !bytes.Equal(got[:s.Len], c.data[i]) {
			t.Fatalf("segment %d at %d reads back wrong (%v)", i, s.Off, err)
		}
		if s.Off+s.Len+8192 > T {
			continue
		}
		if _, err := f.ReadAt(got[:4096], BlockSize+s.Off+s.Len+4096); err != nil || !bytes.Equal(got[:4096], make([]byte, 4096)) {
			t.Fatalf("the hole after segment %d does not read as zeros (%v)", i, err)
		}
	}
	var st unix.Stat_t
	unix.Fstat(int(f.Fd()), &st)
	if st.Blocks*512 > 1<<20 {
		t.Errorf("1 TiB of holes allocate %d bytes", st.Blocks*512)
	}
}

var sparseRand = rand.New(rand.NewSource(4))

func random(n int) []byte {
	p := make([]byte, n)
	sparseRand.Read(p)
	return p
}
