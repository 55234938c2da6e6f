package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"z.gfire.dev/gvx/core/fstree"
	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/internal/treecheck"
)

// memSink keeps content in memory.
type memSink struct{ files [][]byte }

func (m *memSink) AddFile(r io.Reader, size int64) (uint64, error) {
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, err
	}
	m.files = append(m.files, b)
	return uint64(len(m.files) - 1), nil
}

func (m *memSink) listing(t *testing.T, root *fstree.Node) treecheck.Listing {
	t.Helper()
	l, err := treecheck.FromTree(root, func(n *fstree.Node) (io.Reader, error) {
		return bytes.NewReader(m.files[n.Data]), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func flattenSpecs(t *testing.T, specs [][]testimage.Entry) (*Flattener, *memSink, error) {
	t.Helper()
	sink := &memSink{}
	f := NewFlattener(sink)
	for _, spec := range specs {
		raw, err := testimage.TarLayer(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.ApplyLayer(bytes.NewReader(raw)); err != nil {
			return f, sink, err
		}
	}
	return f, sink, nil
}

func TestFlattenTestImage(t *testing.T) {
	specs := testimage.Layers([]byte("not really busybox"))
	f, sink, err := flattenSpecs(t, specs)
	if err != nil {
		t.Fatal(err)
	}
	want, wantXattrs := testimage.Expected(specs)
	if diff := treecheck.Diff(want, sink.listing(t, f.Root()), treecheck.Ignore{}); len(diff) > 0 {
		t.Fatalf("flattened tree differs from the reference model:\n%s", strings.Join(diff, "\n"))
	}
	for p, x := range wantXattrs {
		got := fstree.Lookup(f.Root(), p).Xattrs
		if len(got) != len(x) {
			t.Errorf("%s: xattrs %q, want %q", p, got, x)
		}
		for k, v := range x {
			if got[k] != v {
				t.Errorf("%s: xattr %s = %q, want %q", p, k, got[k], v)
			}
		}
	}
	if s := f.Stats(); s.XattrFiles != len(wantXattrs) || s.Whiteouts != 3 {
		t.Errorf("stats %+v: want %d xattr files and 3 whiteouts", s, len(wantXattrs))
	}
	// Spot checks that the reference model itself is right.
	for _, gone := range []string{"etc/deleteme", "opt/old/a", "opt/old/sub", "var/cache/apt", "srv/data/inside"} {
		if _, ok := want[gone]; ok {
			t.Errorf("reference model keeps %q", gone)
		}
	}
	if want["bin/busybox-hard"].Inode != "bin/busybox" || want["bin/busybox"].Nlink != 2 {
		t.Errorf("cross-layer hard link: %+v", want["bin/busybox-hard"])
	}
}

type entry = testimage.Entry

func reg(name, content string) entry {
	return entry{Name: name, Type: tar.TypeReg, Mode: 0o644, Content: []byte(content), Mtime: time.Unix(1, 0)}
}

func TestFlattenSemantics(t *testing.T) {
	cases := []struct {
		name   string
		layers [][]entry
		want   map[string]string // path → content ("" for a directory), absent paths must not exist
		absent []string
	}{
		{
			name: "whiteout in the same layer keeps that layer's file",
			layers: [][]entry{
				{reg("a", "lower")},
				{reg("a", "upper"), {Name: ".wh.a", Type: tar.TypeReg}},
			},
			want: map[string]string{"a": "upper"},
		},
		{
			name: "opaque keeps entries of its own layer, in any order",
			layers: [][]entry{
				{reg("d/old", "x"), reg("d/sub/old", "x")},
				{reg("d/sub/new", "n"), {Name: "d/.wh..wh..opq", Type: tar.TypeReg}, reg("d/new", "n")},
			},
			want:   map[string]string{"d/new": "n", "d/sub/new": "n"},
			absent: []string{"d/old", "d/sub/old"},
		},
		{
			name: "file replaces directory, directory replaces file",
			layers: [][]entry{
				{reg("x/inside", "1"), reg("y", "file")},
				{reg("x", "now a file"), {Name: "y/", Type: tar.TypeDir, Mode: 0o755}, reg("y/z", "2")},
			},
			want:   map[string]string{"x": "now a file", "y/z": "2"},
			absent: []string{"x/inside"},
		},
		{
			name: "hard link keeps the old content when its first path is replaced",
			layers: [][]entry{
				{reg("a", "old"), {Name: "b", Type: tar.TypeLink, Linkname: "a"}},
				{reg("a", "new")},
			},
			want: map[string]string{"a": "new", "b": "old"},
		},
		{
			name: "whiteout of a missing path and of AUFS metadata is harmless",
			layers: [][]entry{
				{reg("a", "1")},
				{{Name: "nope/.wh.x", Type: tar.TypeReg}, {Name: ".wh..wh.plnk", Type: tar.TypeReg}, {Name: ".wh.zzz", Type: tar.TypeReg}},
			},
			want: map[string]string{"a": "1"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, sink, err := flattenSpecs(t, c.layers)
			if err != nil {
				t.Fatal(err)
			}
			for p, content := range c.want {
				n := fstree.Lookup(f.Root(), p)
				if n == nil {
					t.Errorf("%q missing", p)
					continue
				}
				if n.Type() == fstree.TypeRegular && string(sink.files[n.Data]) != content {
					t.Errorf("%q = %q, want %q", p, sink.files[n.Data], content)
				}
			}
			for _, p := range c.absent {
				if fstree.Lookup(f.Root(), p) != nil {
					t.Errorf("%q should be gone", p)
				}
			}
		})
	}
}

func TestFlattenRejectsHostileLayers(t *testing.T) {
	cases := []struct {
		name   string
		layers [][]entry
		want   string // in the error
		entry  string // the entry the error must name
	}{
		{"dotdot", [][]entry{{reg("../etc/passwd", "x")}}, `".." component`, "../etc/passwd"},
		{"absolute escape", [][]entry{{reg("/../../etc/passwd", "x")}}, `".." component`, "/../../etc/passwd"},
		{"inner dotdot", [][]entry{{reg("a/../../b", "x")}}, `".." component`, "a/../../b"},
		{"hard link outside", [][]entry{{{Name: "x", Type: tar.TypeLink, Linkname: "../../etc/shadow"}}}, `".." component`, "x"},
		{"hard link to nothing", [][]entry{{{Name: "x", Type: tar.TypeLink, Linkname: "/etc/shadow"}}}, "does not exist", "x"},
		{"hard link to a directory", [][]entry{{{Name: "d/", Type: tar.TypeDir}, {Name: "x", Type: tar.TypeLink, Linkname: "d"}}}, "is a directory", "x"},
		{"write through symlink, same layer", [][]entry{{
			{Name: "a", Type: tar.TypeSymlink, Linkname: "/etc"}, reg("a/passwd", "pwned"),
		}}, "is a symlink", "a/passwd"},
		{"write through symlink, across layers", [][]entry{
			{{Name: "a", Type: tar.TypeSymlink, Linkname: "../../../.."}},
			{reg("a/b/passwd", "pwned")},
		}, "is a symlink", "a/b/passwd"},
		{"hard link through symlink", [][]entry{{
			{Name: "l", Type: tar.TypeSymlink, Linkname: "/bin"}, {Name: "x", Type: tar.TypeLink, Linkname: "l/busybox"},
		}}, "goes through symlink", "x"},
		{"whiteout through symlink", [][]entry{
			{{Name: "a", Type: tar.TypeSymlink, Linkname: "/etc"}},
			{{Name: "a/.wh.passwd", Type: tar.TypeReg}},
		}, "delete through a symlink", "a/.wh.passwd"},
		{"parent is a file", [][]entry{{reg("f", "x"), reg("f/g", "y")}}, "not a directory", "f/g"},
		{"whiteout of dotdot", [][]entry{{{Name: "d/", Type: tar.TypeDir}}, {{Name: "d/.wh...", Type: tar.TypeReg}}}, "not a valid name", "d/.wh..."},
		{"unsupported type", [][]entry{{{Name: "v", Type: 'V'}}}, "unsupported tar entry type", "v"},
		{"empty symlink", [][]entry{{{Name: "s", Type: tar.TypeSymlink}}}, "empty target", "s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := flattenSpecs(t, c.layers)
			if err == nil {
				t.Fatalf("no error; want one containing %q", c.want)
			}
			le, ok := err.(*LayerError)
			if !ok {
				t.Fatalf("error %v is %T, want *LayerError", err, err)
			}
			if le.Entry != c.entry || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q; want entry %q and %q in it", err, c.entry, c.want)
			}
		})
	}
}

func TestFlattenTruncatedTar(t *testing.T) {
	raw, err := testimage.TarLayer([]entry{reg("a", strings.Repeat("x", 5000)), reg("b", "y")})
	if err != nil {
		t.Fatal(err)
	}
	f := NewFlattener(&memSink{})
	err = f.ApplyLayer(bytes.NewReader(raw[:3000]))
	if err == nil || !strings.Contains(err.Error(), "content ended") && !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated tar: got %v", err)
	}
}

// discardSink reads and drops content.
type discardSink struct{}

func (discardSink) AddFile(r io.Reader, size int64) (uint64, error) {
	_, err := io.CopyN(io.Discard, r, size)
	return 0, err
}

// sparseLayer is a layer of one GNU sparse file (PAX format 0.1) of
// realSize bytes holding 5 bytes of data: what archive/tar reads as
// realSize bytes, almost all of them holes that cost no reads from the
// stream.
func sparseLayer(realSize int64) []byte {
	rec := ""
	for _, kv := range [][2]string{{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"}, {"GNU.sparse.name", "s"},
		{"GNU.sparse.realsize", strconv.FormatInt(realSize, 10)}, {"GNU.sparse.numblocks", "1"}, {"GNU.sparse.map", "0,5"}} {
		line := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(line) + 1
		for n != len(strconv.Itoa(n))+len(line) {
			n = len(strconv.Itoa(n)) + len(line)
		}
		rec += strconv.Itoa(n) + line
	}
	var buf bytes.Buffer
	block := func(name string, typ byte, body string) {
		h := make([]byte, 512)
		copy(h, name)
		copy(h[100:], "0000644\x00")
		copy(h[108:], "0000000\x00")
		copy(h[116:], "0000000\x00")
		copy(h[124:], fmt.Sprintf("%011o\x00", len(body)))
		copy(h[136:], "00000000001\x00")
		h[156] = typ
		copy(h[257:], "ustar\x0000")
		copy(h[148:156], "        ")
		sum := 0
		for _, b := range h {
			sum += int(b)
		}
		copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
		buf.Write(h)
		buf.WriteString(body)
		buf.Write(make([]byte, (512-len(body)%512)%512))
	}
	block("PaxHeaders/s", tar.TypeXHeader, rec)
	block("s", tar.TypeReg, "hello")
	buf.Write(make([]byte, 1024))
	return buf.Bytes()
}

// TestFlattenCancelledInSparseHoles: a pull cancelled (SIGINT, SIGTERM)
// while a tiny layer's sparse entry claims 16 TiB of holes ends at once;
// the holes cost no reads from the stream, so watching the stream alone
// left rungv converting zeros for minutes.
func TestFlattenCancelledInSparseHoles(t *testing.T) {
	raw := sparseLayer(16 << 40)
	sum := sha256.Sum256(raw)
	img := &Image{Layers: []Layer{{
		DiffID: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
		Source: "test",
		open:   func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
	}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := Flatten(ctx, img, discardSink{}, FlattenOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Flatten returned before the cancel: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Flatten after the cancel: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Flatten still converting holes 10 s after the cancel")
	}
}
