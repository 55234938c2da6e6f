package image

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gverofs "gvisor.dev/gvisor/pkg/erofs"

	"z.gfire.dev/gvx/core/erofs"
	"z.gfire.dev/gvx/core/fstree"
	"z.gfire.dev/gvx/core/internal/sparsetar"
)

// gnuTarFormats are the sparse formats GNU tar writes.
var gnuTarFormats = []struct {
	name string
	args []string
}{
	{"gnu", []string{"--format=gnu", "--sparse"}},
	{"pax-0.0", []string{"--format=posix", "--sparse-version=0.0"}},
	{"pax-0.1", []string{"--format=posix", "--sparse-version=0.1"}},
	{"pax-1.0", []string{"--format=posix", "--sparse-version=1.0"}},
}

func needGNUTar(t *testing.T) {
	t.Helper()
	out, err := exec.Command("tar", "--version").Output()
	if err != nil || !strings.Contains(string(out), "GNU tar") {
		t.Skip("GNU tar is not installed (apt-get install tar)")
	}
}

// sparseFile makes the file p of size bytes whose data is data (offset to
// bytes), the rest holes.
func sparseFile(t *testing.T, p string, size int64, data map[int64]string) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, s := range data {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
}

// gnuTar archives the names in dir with GNU tar and args.
func gnuTar(t *testing.T, dir string, args []string, names ...string) []byte {
	t.Helper()
	cmd := exec.Command("tar", append(append([]string{"-C", dir, "-cf", "-", "--owner=0", "--group=0"}, args...), names...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tar %v: %v\n%s", args, err, stderr.Bytes())
	}
	return out
}

// erofsImage flattens layers into an EROFS image and opens it with
// gVisor's reader.
func erofsImage(t *testing.T, layers ...[]byte) (*gverofs.Image, time.Duration) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "image.erofs"))
	if err != nil {
		t.Fatal(err)
	}
	w := erofs.NewWriter(f)
	fl := NewFlattener(w)
	start := time.Now()
	for _, l := range layers {
		if err := fl.ApplyLayer(bytes.NewReader(l)); err != nil {
			f.Close()
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	if _, err := w.Finish(fl.Root(), erofs.Options{}); err != nil {
		f.Close()
		t.Fatal(err)
	}
	img, err := gverofs.OpenImage(f) // it owns f from here
	if err != nil {
		f.Close()
		t.Fatalf("gVisor refuses the image: %v", err)
	}
	t.Cleanup(img.Close)
	return img, took
}

// imageFile finds name in img's root: its size and where its content
// starts in the image.
func imageFile(t *testing.T, img *gverofs.Image, name string) (int64, int64) {
	t.Helper()
	root, err := img.Inode(img.RootNid())
	if err != nil {
		t.Fatal(err)
	}
	nid, err := root.Lookup(name)
	if err != nil {
		t.Fatalf("%s is not in the image: %v", name, err)
	}
	in, err := img.Inode(nid)
	if err != nil || !in.IsRegular() {
		t.Fatalf("%s: %v, regular %v", name, err, in.IsRegular())
	}
	off, err := in.DataOffset()
	if err != nil {
		t.Fatal(err)
	}
	return int64(in.Size()), int64(off)
}

// sameContent checks that name in img has the content of the host file
// src: all of it, or, for a large file, the data SEEK_DATA finds and a
// few bytes of each hole.
func sameContent(t *testing.T, img *gverofs.Image, name, src string) {
	t.Helper()
	size, off := imageFile(t, img, name)
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	if size != st.Size() {
		t.Fatalf("%s: %d bytes in the image, %d in the source", name, size, st.Size())
	}
	at := func(o, n int64) []byte {
		b := make([]byte, n)
		if _, err := syscall.Pread(img.FD(), b, off+o); err != nil && n > 0 {
			t.Fatal(err)
		}
		return b
	}
	if size <= 64<<20 {
		want, _ := os.ReadFile(src)
		if !bytes.Equal(at(0, size), want) {
			t.Errorf("%s: the image's content differs from the source", name)
		}
		return
	}
	segs, err := sparsetar.FileData(f, size)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for _, s := range segs {
		want := make([]byte, s.Len)
		f.ReadAt(want, s.Off)
		if !bytes.Equal(at(s.Off, s.Len), want) {
			t.Errorf("%s: the data at %d (%d bytes) differs from the source", name, s.Off, s.Len)
		}
		if s.Off > end && !bytes.Equal(at((end+s.Off)/2, 4096), make([]byte, 4096)) {
			t.Errorf("%s: the hole before %d is not zeros", name, s.Off)
		}
		end = s.Off + s.Len
	}
}

// TestFlattenGNUSparse converts what GNU tar writes for sparse files, in
// each of its formats, among ordinary entries, and checks the image reads
// back as the files did: data at its offsets, holes as zeros.
func TestFlattenGNUSparse(t *testing.T) {
	needGNUTar(t)
	dir := t.TempDir()
	const M = 1 << 20
	sparseFile(t, filepath.Join(dir, "mid"), 3*M+123, map[int64]string{64 << 10: "in the middle", 2 * M: "more"})
	sparseFile(t, filepath.Join(dir, "starts-ends-data"), 5*M+7, map[int64]string{0: "first", 5*M + 2: "last!"})
	sparseFile(t, filepath.Join(dir, "all-hole"), 10*M, nil)
	sparseFile(t, filepath.Join(dir, "empty"), 0, nil)
	sparseFile(t, filepath.Join(dir, "tail-data"), 2*M+1, map[int64]string{2 * M: "x"})
	sparseFile(t, filepath.Join(dir, "many"), 8*M, func() map[int64]string {
		m := map[int64]string{}
		for i := int64(0); i < 8*M; i += 128 << 10 {
			m[i] = fmt.Sprint("segment ", i)
		}
		return m
	}())
	if err := os.WriteFile(filepath.Join(dir, "plain"), []byte(strings.Repeat("p", 1001)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("mid", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	// A whiteout's content is never read: the stream must still stay in
	// step past it.
	sparseFile(t, filepath.Join(dir, ".wh.gone"), 4*M, map[int64]string{M: "ignored"})
	names := []string{"plain", "mid", "link", ".wh.gone", "starts-ends-data", "all-hole", "empty", "tail-data", "many", "after"}
	if err := os.WriteFile(filepath.Join(dir, "after"), []byte("after the sparse files"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, format := range gnuTarFormats {
		t.Run(format.name, func(t *testing.T) {
			layer := gnuTar(t, dir, format.args, names...)
			if len(layer) > 2*M {
				t.Fatalf("the layer is %d bytes: GNU tar did not store the files sparse", len(layer))
			}
			img, _ := erofsImage(t, layer)
			for _, n := range names {
				if n != "link" && n != ".wh.gone" {
					sameContent(t, img, n, filepath.Join(dir, n))
				}
			}
			// A sink that cannot keep holes gets them as zeros.
			sink := &memSink{}
			f := NewFlattener(sink)
			if err := f.ApplyLayer(bytes.NewReader(layer)); err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				node := fstree.Lookup(f.Root(), n)
				if n == "link" || n == ".wh.gone" {
					continue
				}
				want, _ := os.ReadFile(filepath.Join(dir, n))
				if !bytes.Equal(sink.files[node.Data], want) {
					t.Errorf("%s: read through tar.Reader's way, the content differs", n)
				}
			}
		})
	}
}

// TestFlattenSparseTiB converts a layer whose one file claims 1 TiB, all
// holes but three runs of data: the holes must cost nothing.
func TestFlattenSparseTiB(t *testing.T) {
	needGNUTar(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "huge")
	const T = 1 << 40
	sparseFile(t, src, T, map[int64]string{0: "start", T / 2: "middle", T - 5000: "near the end"})
	for _, format := range gnuTarFormats {
		t.Run(format.name, func(t *testing.T) {
			layer := gnuTar(t, dir, format.args, "huge")
			img, took := erofsImage(t, layer)
			t.Logf("%s: converted a 1 TiB sparse file (%d-byte layer) in %v", format.name, len(layer), took)
			sameContent(t, img, "huge", src)
			var st syscall.Stat_t
			if err := syscall.Fstat(img.FD(), &st); err != nil {
				t.Fatal(err)
			}
			if st.Blocks*512 > 4<<20 {
				t.Errorf("the image allocates %d bytes for 1 TiB of holes", st.Blocks*512)
			}
		})
	}
}

// tarBlock is a tar header block: name, type, size, magic ("ustar\x0000"
// or GNU's "ustar  \x00"), edited by edit before its checksum.
func tarBlock(name string, typ byte, size int64, magic string, edit func(b []byte)) []byte {
	h := make([]byte, 512)
	copy(h, name)
	copy(h[100:], "0000644\x00")
	copy(h[108:], "0000000\x00")
	copy(h[116:], "0000000\x00")
	copy(h[124:], fmt.Sprintf("%011o\x00", size))
	copy(h[136:], "00000000001\x00")
	h[156] = typ
	copy(h[257:], magic)
	if edit != nil {
		edit(h)
	}
	copy(h[148:156], "        ")
	sum := 0
	for _, b := range h {
		sum += int(b)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

func pad(b []byte) []byte { return append(b, make([]byte, -len(b)&511)...) }

// pax01Layer is a PAX 0.1 sparse entry "s" of realSize bytes with the
// given block count and map, storing data.
func pax01Layer(realSize int64, numBlocks, spMap, data string) []byte {
	rec := paxRecords([][2]string{{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"}, {"GNU.sparse.name", "s"},
		{"GNU.sparse.realsize", fmt.Sprint(realSize)}, {"GNU.sparse.numblocks", numBlocks}, {"GNU.sparse.map", spMap}})
	b := append(tarBlock("PaxHeaders/s", 'x', int64(len(rec)), "ustar\x0000", nil), pad([]byte(rec))...)
	b = append(b, tarBlock("GNUSparseFile.0/s", '0', int64(len(data)), "ustar\x0000", nil)...)
	return append(append(b, pad([]byte(data))...), make([]byte, 1024)...)
}

// pax10Layer is a PAX 1.0 sparse entry "s": its map text, then data.
func pax10Layer(realSize int64, spMap, data string, cut int) []byte {
	rec := paxRecords([][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"}, {"GNU.sparse.name", "s"},
		{"GNU.sparse.realsize", fmt.Sprint(realSize)}})
	body := append(pad([]byte(spMap)), data...)
	b := append(tarBlock("PaxHeaders/s", 'x', int64(len(rec)), "ustar\x0000", nil), pad([]byte(rec))...)
	b = append(b, tarBlock("GNUSparseFile.0/s", '0', int64(len(body)), "ustar\x0000", nil)...)
	b = append(append(b, pad(body)...), make([]byte, 1024)...)
	if cut > 0 {
		b = b[:cut]
	}
	return b
}

// oldGNULayer is a type 'S' entry "s": the first four segments in its
// header, the rest in extension blocks, then data.
func oldGNULayer(realSize int64, segs []sparsetar.Segment, data string, cut int) []byte {
	field := func(b []byte, v int64) { copy(b, fmt.Sprintf("%011o\x00", v)) }
	var ext [][]byte
	hdr := tarBlock("s", 'S', int64(len(data)), "ustar  \x00", func(h []byte) {
		field(h[483:], realSize)
		for i, s := range segs[:min(4, len(segs))] {
			field(h[386+24*i:], s.Off)
			field(h[386+24*i+12:], s.Len)
		}
		for rest := segs[min(4, len(segs)):]; len(rest) > 0; rest = rest[min(21, len(rest)):] {
			h[482] = 1
			e := make([]byte, 512)
			for i, s := range rest[:min(21, len(rest))] {
				field(e[24*i:], s.Off)
				field(e[24*i+12:], s.Len)
			}
			if len(ext) > 0 {
				ext[len(ext)-1][504] = 1
			}
			ext = append(ext, e)
		}
	})
	b := hdr
	for _, e := range ext {
		b = append(b, e...)
	}
	b = append(append(b, pad([]byte(data))...), make([]byte, 1024)...)
	if cut > 0 {
		b = b[:cut]
	}
	return b
}

func paxRecords(kvs [][2]string) string {
	var s string
	for _, kv := range kvs {
		line := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(line) + 1
		for n != len(fmt.Sprint(n))+len(line) {
			n = len(fmt.Sprint(n)) + len(line)
		}
		s += fmt.Sprint(n) + line
	}
	return s
}

// TestFlattenSparseMalformed: a malformed sparse map, in any format, is
// refused at once, naming the entry and what is wrong with the map.
func TestFlattenSparseMalformed(t *testing.T) {
	segs := func(v ...int64) []sparsetar.Segment {
		var s []sparsetar.Segment
		for i := 0; i+1 < len(v); i += 2 {
			s = append(s, sparsetar.Segment{Off: v[i], Len: v[i+1]})
		}
		return s
	}
	many := make([]int64, 0, 60)
	for i := int64(0); i < 30; i++ {
		many = append(many, i*100, 1)
	}
	many[59] = 2 // one byte more than stored
	for _, c := range []struct {
		name  string
		layer []byte
		want  string
	}{
		{"pax 0.1 overlapping", pax01Layer(100, "2", "10,5,12,5", "helloworld"), "overlapping"},
		{"pax 0.1 past the end", pax01Layer(10, "1", "1000,5", "hello"), "past the file's length"},
		{"pax 0.1 negative", pax01Layer(10, "1", "-5,5", "hello"), "negative"},
		{"pax 0.1 more data than mapped", pax01Layer(100, "1", "0,3", "hello"), "places 3 bytes of data but the entry stores 5"},
		{"pax 0.1 less data than mapped", pax01Layer(100, "1", "0,9", "hello"), "places 9 bytes of data but the entry stores 5"},
		{"pax 0.1 wrong count", pax01Layer(100, "2", "0,5", "hello"), "GNU.sparse.numblocks"},
		{"pax 0.1 claiming 2^31 entries", pax01Layer(10, fmt.Sprint(1<<31), "0,5", "hello"), "GNU.sparse.numblocks"},
		{"pax 1.0 overlapping", pax10Layer(100, "2\n10\n5\n12\n5\n", "helloworld", 0), "overlapping"},
		{"pax 1.0 sum mismatch", pax10Layer(100, "1\n0\n9\n", "hello", 0), "places 9 bytes of data but the entry stores 5"},
		{"pax 1.0 map cut short", pax10Layer(100, "1\n0\n5\n", "hello", 1536+300), "cut short"},
		{"pax 1.0 map cut at a block", pax10Layer(100, "1\n0\n5\n", "hello", 1536), "cut short"},
		{"pax 1.0 not a count", pax10Layer(100, "x\n0\n5\n", "hello", 0), "not a count"},
		{"old GNU overlapping", oldGNULayer(100, segs(10, 5, 12, 5), "helloworld", 0), "overlapping"},
		{"old GNU past the end", oldGNULayer(10, segs(8, 5), "hello", 0), "past the file's length"},
		{"old GNU sum mismatch in an extension block", oldGNULayer(10000, segs(many...), strings.Repeat("x", 30), 0), "places 31 bytes of data but the entry stores 30"},
		{"old GNU extension block cut short", oldGNULayer(10000, segs(many...), strings.Repeat("x", 31), 512+200), "cut short"},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				f, _ := os.Create(filepath.Join(t.TempDir(), "image"))
				defer f.Close()
				done <- NewFlattener(erofs.NewWriter(f)).ApplyLayer(bytes.NewReader(c.layer))
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("no answer 30 s on")
			}
			var le *LayerError
			if !errors.As(err, &le) || le.Entry != "s" || !strings.Contains(err.Error(), "sparse map") || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "malformed") {
				t.Fatalf("got %v, want a LayerError for entry \"s\" on its sparse map saying %q", err, c.want)
			}
			t.Log(err)
		})
	}
}
