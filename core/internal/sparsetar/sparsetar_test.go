package sparsetar

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sparseFile makes a file of size bytes in dir whose data is "data" at
// each of offs, the rest holes.
func sparseFile(t *testing.T, dir string, size int64, offs ...int64) string {
	t.Helper()
	p := filepath.Join(dir, "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range offs {
		if _, err := f.WriteAt([]byte("data"), off); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func blocks(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}

// TestSparseRoundTrip: a file with holes goes into a tar stream as its
// data alone, and comes out of archive/tar and of GNU tar with its holes.
func TestSparseRoundTrip(t *testing.T) {
	const size = 50 << 20
	src := sparseFile(t, t.TempDir(), size, 1<<20, 30<<20+5)
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := FileData(f, size)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 2 || data[0].Off > 1<<20 || data[1].Off > 30<<20+5 {
		t.Fatalf("FileData found %v", data)
	}
	scanned, err := Scan(f, size, make([]byte, 64<<10))
	if err != nil || len(scanned) != 2 || scanned[0] != (Segment{1 << 20, BlockSize}) || scanned[1] != (Segment{30 << 20, BlockSize}) {
		t.Fatalf("Scan found %v %v", scanned, err)
	}

	mtime := time.Date(2021, 2, 3, 4, 5, 6, 789000000, time.UTC)
	name := "dir/" + strings.Repeat("long-name-", 12) + "sparse"
	var buf bytes.Buffer
	sw := NewWriter(&buf)
	sw.WriteHeader(&tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755})
	if err := sw.WriteSparseHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o640, Size: size, Uid: 1000, Gid: 3000000, ModTime: mtime}, data); err != nil {
		t.Fatal(err)
	}
	for _, s := range data {
		if _, err := io.Copy(sw, io.NewSectionReader(f, s.Off, s.Len)); err != nil {
			t.Fatal(err)
		}
	}
	sw.WriteHeader(&tar.Header{Name: "dir/after", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	sw.Write([]byte("end"))
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() > 1<<20 {
		t.Errorf("the archive of a 50 MiB file with two blocks of data has %d bytes", buf.Len())
	}
	stream := buf.Bytes()

	want, _ := os.ReadFile(src)
	tr := tar.NewReader(bytes.NewReader(stream))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name != name {
			continue
		}
		if !IsSparse(h) || h.Size != size || h.Mode != 0o640 || h.Uid != 1000 || h.Gid != 3000000 || !h.ModTime.Equal(mtime) {
			t.Errorf("sparse entry read back as %+v", h)
		}
		dst := filepath.Join(t.TempDir(), "out")
		out, err := os.Create(dst)
		if err != nil {
			t.Fatal(err)
		}
		n, err := WriteHoles(out, tr, make([]byte, 64<<10))
		out.Close()
		if err != nil || n != size {
			t.Fatalf("WriteHoles: %d %v", n, err)
		}
		if got, _ := os.ReadFile(dst); !bytes.Equal(got, want) {
			t.Errorf("the content came back different")
		}
		if b := blocks(t, dst); b > 64 {
			t.Errorf("the file written back has %d blocks, want its holes kept", b)
		}
	}
	if strings.Join(names, " ") != "dir/ "+name+" dir/after" {
		t.Errorf("entries %q", names)
	}

	// GNU tar reads it as the same sparse file.
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no GNU tar")
	}
	x := t.TempDir()
	cmd := exec.Command("tar", "-xf", "-", "-C", x)
	cmd.Stdin = bytes.NewReader(stream)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GNU tar: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(x, name)); !bytes.Equal(got, want) {
		t.Errorf("GNU tar extracted different content")
	}
	if b := blocks(t, filepath.Join(x, name)); b > 64 {
		t.Errorf("GNU tar made %d blocks, want the holes kept", b)
	}
}

// TestWriteHolesRefusesTruncatedContent: an archive that ends mid-file is
// a ReadError, not a short file.
func TestWriteHolesRefusesTruncatedContent(t *testing.T) {
	out, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	_, err = WriteHoles(out, io.MultiReader(bytes.NewReader(make([]byte, 9000)), iotestErr{}), make([]byte, 8192))
	if _, ok := err.(*ReadError); !ok {
		t.Errorf("WriteHoles of a failing reader: %v", err)
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }
