package sparsetar

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestReaderInStep writes sparse entries among ordinary ones with Writer
// and reads them back with Reader every way it allows: the map and data,
// the content with holes as zeros, or not at all. The ordinary entries
// after each must read as written, which they only do if tar.Reader and
// the stream stay in step.
func TestReaderInStep(t *testing.T) {
	type file struct {
		name string
		size int64
		data []Segment // nil: an ordinary file
	}
	files := []file{
		{name: "plain1", size: 1001},
		{name: "sparse1", size: 1 << 40, data: []Segment{{0, 5}, {1 << 30, 700}, {1<<40 - 3, 3}}},
		{name: "plain2", size: 513},
		{name: "sparse2", size: 10 << 20, data: []Segment{{4096, 4096}}},
		{name: "hole", size: 1 << 20, data: []Segment{}},
		{name: "plain3", size: 3},
	}
	byte1 := func(f file, i int64) byte { return byte(len(f.name)*7 + int(i%251)) }
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: f.size}
		var content []byte
		if f.data == nil {
			if err := w.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
			for i := range f.size {
				content = append(content, byte1(f, i))
			}
		} else {
			if err := w.WriteSparseHeader(hdr, f.data); err != nil {
				t.Fatal(err)
			}
			for _, s := range f.data {
				for i := range s.Len {
					content = append(content, byte1(f, s.Off+i))
				}
			}
		}
		if _, err := w.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"data", "skip", "read"} {
		t.Run(how, func(t *testing.T) {
			r := NewReader(bytes.NewReader(buf.Bytes()))
			for _, f := range files {
				hdr, err := r.Next()
				if err != nil {
					t.Fatalf("before %s: %v", f.name, err)
				}
				if hdr.Name != f.name || hdr.Size != f.size {
					t.Fatalf("got %s of %d bytes, want %s of %d", hdr.Name, hdr.Size, f.name, f.size)
				}
				data, sparse := r.Sparse()
				if sparse != (f.data != nil) {
					t.Fatalf("%s: sparse %v", f.name, sparse)
				}
				if !sparse {
					got, err := io.ReadAll(r)
					if err != nil || int64(len(got)) != f.size || (f.size > 0 && got[f.size-1] != byte1(f, f.size-1)) {
						t.Fatalf("%s: read %d bytes, %v", f.name, len(got), err)
					}
					continue
				}
				// Writer adds an empty last segment for a trailing hole.
				want := slices.DeleteFunc(slices.Clone(data), func(s Segment) bool { return s.Len == 0 })
				if !slices.Equal(want, f.data) {
					t.Fatalf("%s: map %v, want %v", f.name, data, f.data)
				}
				switch how {
				case "data":
					got, err := io.ReadAll(readerOf(r.ReadData))
					if err != nil {
						t.Fatal(err)
					}
					var at int
					for _, s := range f.data {
						for i := range s.Len {
							if got[at] != byte1(f, s.Off+i) {
								t.Fatalf("%s: data byte %d is wrong", f.name, at)
							}
							at++
						}
					}
					if at != len(got) {
						t.Fatalf("%s: %d bytes of data, want %d", f.name, len(got), at)
					}
				case "read":
					if f.size > 64<<20 {
						continue // skipped: a terabyte of zeros
					}
					got, err := io.ReadAll(r)
					if err != nil || int64(len(got)) != f.size {
						t.Fatalf("%s: read %d bytes, %v", f.name, len(got), err)
					}
					for _, s := range f.data {
						if got[s.Off] != byte1(f, s.Off) || s.Off > 0 && got[s.Off-1] != 0 {
							t.Fatalf("%s: wrong around %d", f.name, s.Off)
						}
					}
				}
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatalf("after the last entry: %v, want EOF", err)
			}
		})
	}
}

type readerOf func([]byte) (int, error)

func (f readerOf) Read(p []byte) (int, error) { return f(p) }

// TestReaderHeadersTooLong: a sparse entry whose headers exceed what
// Reader keeps is refused, naming it; an ordinary one is read.
func TestReaderHeadersTooLong(t *testing.T) {
	for _, sparse := range []bool{false, true} {
		var b []byte
		// Seven PAX headers of 1 MiB less a little (archive/tar keeps
		// the last): more than 6 MiB of headers in all.
		hdr := &tar.Header{}
		for i := range 7 {
			rec := record("comment", strings.Repeat("v", 1<<20-400))
			if i == 6 && sparse {
				rec += record("GNU.sparse.major", "0") + record("GNU.sparse.minor", "1") +
					record("GNU.sparse.numblocks", "1") + record("GNU.sparse.map", "0,5") + record("GNU.sparse.realsize", "9")
			}
			b = append(b, ustar("PaxHeaders/f", 'x', 0o644, int64(len(rec)), hdr)...)
			b = append(b, rec...)
			b = append(b, make([]byte, padding(int64(len(rec))))...)
		}
		b = append(b, ustar("f", '0', 0o644, 5, hdr)...)
		b = append(b, "hello"...)
		b = append(b, make([]byte, 507+1024)...)
		r := NewReader(bytes.NewReader(b))
		_, err := r.Next()
		t.Logf("sparse %v: %v", sparse, err)
		if sparse != (err != nil) || sparse && !strings.Contains(err.Error(), `entry "f"`) {
			t.Errorf("sparse %v: %v", sparse, err)
		}
		if err == nil {
			if got, err := io.ReadAll(r); string(got) != "hello" || err != nil {
				t.Errorf("read %q, %v", got, err)
			}
		}
	}
}

// FuzzReader: on any stream, Reader never panics, and every entry it
// reads has the content tar.Reader reads for it, holes as zeros.
func FuzzReader(f *testing.F) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.WriteSparseHeader(&tar.Header{Name: "s", Mode: 0o644, Size: 10000}, []Segment{{10, 5}, {5000, 3}})
	w.Write([]byte("helloabc"))
	w.WriteHeader(&tar.Header{Name: "p", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	w.Write([]byte("xyz"))
	w.Close()
	f.Add(buf.Bytes())
	old := make([]byte, 512*4)
	copy(old, "s")
	copy(old[124:], "00000000005\x00")
	old[156] = 'S'
	copy(old[257:], "ustar  \x00")
	copy(old[386:], "00000000002\x0000000000005\x00")
	copy(old[483:], "00000000100\x00")
	copy(old[148:156], "        ")
	sum := 0
	for _, c := range old[:512] {
		sum += int(c)
	}
	copy(old[148:], fmt.Sprintf("%06o\x00 ", sum))
	copy(old[512:], "hello")
	f.Add(old)
	f.Fuzz(func(t *testing.T, b []byte) {
		ours, theirs := NewReader(bytes.NewReader(b)), tar.NewReader(bytes.NewReader(b))
		for {
			h1, err1 := ours.Next()
			h2, err2 := theirs.Next()
			if err1 != nil || err2 != nil {
				if err1 == nil && err2 != nil {
					t.Fatalf("Reader reads %q where tar.Reader fails: %v", h1.Name, err2)
				}
				return
			}
			if h1.Name != h2.Name || h1.Size != h2.Size {
				t.Fatalf("entry %q of %d bytes, tar.Reader's %q of %d", h1.Name, h1.Size, h2.Name, h2.Size)
			}
			if h1.Size > 1<<20 {
				continue
			}
			c1, e1 := io.ReadAll(ours)
			c2, e2 := io.ReadAll(theirs)
			if e1 == nil && e2 == nil && !bytes.Equal(c1, c2) {
				t.Fatalf("%q: content differs from tar.Reader's", h1.Name)
			}
			if e1 != nil || e2 != nil {
				return
			}
		}
	})
}
