package sentry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/sparsetar"
)

// testTree is an archive of every kind of entry CopyIn makes.
func testTree(t *testing.T, big []byte) []byte {
	t.Helper()
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, content []byte) {
		t.Helper()
		h.ModTime = mtime
		h.Size = int64(len(content))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			t.Fatal(err)
		}
	}
	add(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o750, Uid: 1000, Gid: 1000}, nil)
	add(&tar.Header{Name: "./a.txt", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1000, Gid: 100}, []byte("alpha\n"))
	add(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(&tar.Header{Name: "bin/run.sh", Typeflag: tar.TypeReg, Mode: 0o755}, []byte("#!/bin/sh\necho ran\n"))
	add(&tar.Header{Name: "/empty", Typeflag: tar.TypeReg, Mode: 0o600}, nil) // a leading / is dropped
	add(&tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "a.txt"}, nil)
	add(&tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "a.txt"}, nil)
	add(&tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o644}, nil)
	add(&tar.Header{Name: "deep/er/big.bin", Typeflag: tar.TypeReg, Mode: 0o644}, big) // no entries for its parents
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestCopyInAndOut copies onto the root's writable layer and onto an
// ext4lite volume, which implement links, nodes and times separately.
func TestCopyInAndOut(t *testing.T) {
	t.Run("root", func(t *testing.T) {
		s := newSandbox(t, Config{})
		testCopyInAndOut(t, s, "/work")
	})
	t.Run("volume", func(t *testing.T) {
		img := newTestVolume(t, volumeDir(t), 64<<20)
		s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/work"}}})
		testCopyInAndOut(t, s, "/work")
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		checkImageClean(t, img)
	})
}

func testCopyInAndOut(t *testing.T, s *Sandbox, work string) {
	ctx := context.Background()
	startIdle(t, s)
	big := make([]byte, 3<<20+5)
	rand.Read(big)

	st, err := s.CopyIn(ctx, work+"/new/dir", bytes.NewReader(testTree(t, big)), nil)
	if err != nil {
		t.Fatalf("CopyIn: %v", err)
	}
	if st.Entries != 9 || st.Bytes != int64(6+19+len(big)) {
		t.Errorf("CopyIn counted %+v", st)
	}

	// The guest sees what the archive says.
	r := execAndWait(t, s, sh(`cd /work/new/dir && stat -c '%n %a %u:%g %Y %F' . a.txt bin/run.sh empty link fifo && stat -c %h hard && readlink link && cat hard && bin/run.sh && sha256sum deep/er/big.bin && stat -c '%a' /work/new`))
	want := fmt.Sprintf(`. 750 1000:1000 %[1]d directory
a.txt 640 1000:100 %[1]d regular file
bin/run.sh 755 0:0 %[1]d regular file
empty 600 0:0 %[1]d regular empty file
link 777 0:0 %[1]d symbolic link
fifo 644 0:0 %[1]d fifo
2
a.txt
alpha
ran
%[2]x  deep/er/big.bin
755
`, time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC).Unix(), sha256.Sum256(big))
	got := r.stdout
	if got != want {
		t.Fatalf("the guest sees:\n%s\nwant:\n%s\nstderr: %s", got, want, r.stderr)
	}

	// Copying in again replaces files and links, not directories.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "a.txt", Typeflag: tar.TypeSymlink, Linkname: "empty"})
	tw.WriteHeader(&tar.Header{Name: "link", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4})
	tw.Write([]byte("new\n"))
	tw.Close()
	if _, err := s.CopyIn(ctx, work+"/new/dir", &buf, nil); err != nil {
		t.Fatalf("second CopyIn: %v", err)
	}
	if r := execAndWait(t, s, sh(`cd /work/new/dir && readlink a.txt && cat link hard`)); r.stdout != "empty\nnew\nalpha\n" {
		t.Errorf("after replacing: %q %q", r.stdout, r.stderr)
	}

	// Out again: entries under the directory's name, links as links.
	var out bytes.Buffer
	if st, err = s.CopyOut(ctx, work+"/new/dir", &out); err != nil {
		t.Fatalf("CopyOut: %v", err)
	}
	entries := map[string]*tar.Header{}
	contents := map[string][]byte{}
	var order []string
	for _, e := range readArchive(t, &out) {
		entries[e.Name] = e.Header
		order = append(order, e.Name)
		contents[e.Name] = e.content
	}
	wantOrder := "dir/ dir/a.txt dir/bin/ dir/bin/run.sh dir/deep/ dir/deep/er/ dir/deep/er/big.bin dir/empty dir/fifo dir/hard dir/link"
	if got := strings.Join(order, " "); got != wantOrder {
		t.Fatalf("CopyOut entries:\n%s\nwant:\n%s", got, wantOrder)
	}
	if st.Entries != 11 || st.Bytes != int64(19+len(big)+6+4) {
		t.Errorf("CopyOut counted %+v", st)
	}
	for name, check := range map[string]func(h *tar.Header) bool{
		"dir/":      func(h *tar.Header) bool { return h.Typeflag == tar.TypeDir && h.Mode == 0o750 && h.Uid == 1000 },
		"dir/a.txt": func(h *tar.Header) bool { return h.Typeflag == tar.TypeSymlink && h.Linkname == "empty" },
		"dir/bin/run.sh": func(h *tar.Header) bool {
			return h.Mode == 0o755 && string(contents[h.Name]) == "#!/bin/sh\necho ran\n"
		},
		"dir/deep/er/big.bin": func(h *tar.Header) bool { return bytes.Equal(contents[h.Name], big) },
		"dir/fifo":            func(h *tar.Header) bool { return h.Typeflag == tar.TypeFifo },
		"dir/hard": func(h *tar.Header) bool {
			return h.Typeflag == tar.TypeReg && string(contents[h.Name]) == "alpha\n" && h.Uid == 1000 && h.Gid == 100
		},
		"dir/link": func(h *tar.Header) bool { return h.Typeflag == tar.TypeReg && string(contents[h.Name]) == "new\n" },
	} {
		if h := entries[name]; h == nil || !check(h) {
			t.Errorf("CopyOut entry %s: %+v", name, h)
		}
	}
}

func TestCopyInOwner(t *testing.T) {
	ctx := context.Background()
	s := newSandbox(t, Config{})
	startIdle(t, s)
	var buf bytes.Buffer
	buf.Write(testTree(t, []byte("big\n")))
	if _, err := s.CopyIn(ctx, "/tmp/new/dir", &buf, &Owner{UID: 65534, GID: 65534}); err != nil {
		t.Fatalf("CopyIn: %v", err)
	}
	// Every entry, whatever the archive says, and every directory made on
	// the way is the owner's; modes stay, set-ID bits too.
	r := execAndWait(t, s, sh(`cd /tmp && stat -c '%n %u:%g %a' . new new/dir new/dir/a.txt new/dir/bin new/dir/bin/run.sh new/dir/empty new/dir/link new/dir/hard new/dir/fifo new/dir/deep new/dir/deep/er new/dir/deep/er/big.bin`))
	want := `. 0:0 1777
new 65534:65534 755
new/dir 65534:65534 750
new/dir/a.txt 65534:65534 640
new/dir/bin 65534:65534 755
new/dir/bin/run.sh 65534:65534 755
new/dir/empty 65534:65534 600
new/dir/link 65534:65534 777
new/dir/hard 65534:65534 640
new/dir/fifo 65534:65534 644
new/dir/deep 65534:65534 755
new/dir/deep/er 65534:65534 755
new/dir/deep/er/big.bin 65534:65534 644
`
	if r.stdout != want {
		t.Errorf("the guest sees:\n%s\nwant:\n%s%s", r.stdout, want, r.stderr)
	}
	buf.Reset()
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "setuid", Typeflag: tar.TypeReg, Mode: 0o4755})
	tw.Close()
	if _, err := s.CopyIn(ctx, "/tmp/new/dir", &buf, &Owner{UID: 1000, GID: 1000}); err != nil {
		t.Fatalf("CopyIn: %v", err)
	}
	if r := execAndWait(t, s, sh(`stat -c '%u:%g %a' /tmp/new/dir/setuid`)); r.stdout != "1000:1000 4755\n" {
		t.Errorf("a set-user-ID file copied in for uid 1000: %q %q", r.stdout, r.stderr)
	}
}

func TestCopyOutKeepsLinksAndSymlinks(t *testing.T) {
	ctx := context.Background()
	s := newSandbox(t, Config{})
	startIdle(t, s)
	execAndWait(t, s, sh(`mkdir -p /srv/t/sub && echo x > /srv/t/sub/f && ln /srv/t/sub/f /srv/t/f2 && ln -s /etc/passwd /srv/t/p && mkfifo /srv/t/q`))
	var out bytes.Buffer
	if _, err := s.CopyOut(ctx, "/srv/t", &out); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range readArchive(t, &out) {
		got = append(got, fmt.Sprintf("%s %c %s %d", h.Name, h.Typeflag, h.Linkname, h.Size))
	}
	// f2 comes first in order, so it holds the content and sub/f links to it.
	want := "t/ 5  0|t/f2 0  2|t/p 2 /etc/passwd 0|t/q 6  0|t/sub/ 5  0|t/sub/f 1 t/f2 0"
	if strings.Join(got, "|") != want {
		t.Errorf("archive:\n%s\nwant:\n%s", strings.Join(got, "|"), want)
	}

	// A single file is an archive of one entry.
	out.Reset()
	if st, err := s.CopyOut(ctx, "/srv/t/sub/f", &out); err != nil || st.Entries != 1 || st.Bytes != 2 {
		t.Errorf("CopyOut of a file: %+v %v", st, err)
	}
}

func TestCopyRefusals(t *testing.T) {
	ctx := context.Background()
	s := newSandbox(t, Config{})
	tarOf := func(hdrs ...*tar.Header) io.Reader {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hdrs {
			tw.WriteHeader(h)
		}
		tw.Close()
		return &buf
	}
	for _, tc := range []struct {
		name, dir string
		r         io.Reader
		want      string
	}{
		{"climbs out", "/tmp/x", tarOf(&tar.Header{Name: "a/../../escape", Typeflag: tar.TypeReg}), "climbs out of the destination"},
		{"hard link out", "/tmp/x", tarOf(&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}), "climbs out of the destination"},
		{"relative destination", "tmp/x", tarOf(), "a guest path is absolute"},
		{"destination is a file", "/etc/passwd", tarOf(), "not a directory"},
		{"truncated content", "/tmp/y", io.LimitReader(bytes.NewReader(testTree(t, make([]byte, 4096))), 1027), "unexpected EOF"},
		{"not a tar", "/tmp/z", strings.NewReader(strings.Repeat("not a tar stream ", 64)), "reading the tar stream"},
		{"directory in the way", "/", tarOf(&tar.Header{Name: "etc", Typeflag: tar.TypeReg}), "a directory is in the way"},
	} {
		_, err := s.CopyIn(ctx, tc.dir, tc.r, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: CopyIn error %v, want one saying %q", tc.name, err, tc.want)
		}
		if bad := errors.Is(err, ErrBadArchive); bad != (tc.name != "relative destination" && tc.name != "destination is a file") {
			t.Errorf("%s: errors.Is(%v, ErrBadArchive) = %v", tc.name, err, bad)
		}
	}
	if _, err := s.CopyOut(ctx, "/no/such", io.Discard); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("CopyOut of a missing path: %v", err)
	}
	// Nothing was made outside the destinations.
	if _, err := s.Stat(ctx, "/escape"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/escape: %v", err)
	}
}

// TestCopyKeepsHolesAndLinks: a file with holes comes in and goes out as
// its data alone and stays sparse, on a volume (whose blocks show the
// holes) and out of tmpfs (whose blocks do not); a hard-link pair stays
// one file; a symlink keeps its time.
func TestCopyKeepsHolesAndLinks(t *testing.T) {
	ctx := context.Background()
	img := newTestVolume(t, volumeDir(t), 128<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/vol"}}})
	startIdle(t, s)

	const size = 50 << 20
	mtime := time.Date(2022, 3, 4, 5, 6, 7, 0, time.UTC)
	var in bytes.Buffer
	tw := sparsetar.NewWriter(&in)
	tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6, ModTime: mtime})
	tw.Write([]byte("alpha\n"))
	tw.WriteHeader(&tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "a"})
	tw.WriteHeader(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "a", ModTime: mtime})
	data := []sparsetar.Segment{{Off: 1 << 20, Len: 4096}, {Off: 40 << 20, Len: 4096}}
	if err := tw.WriteSparseHeader(&tar.Header{Name: "sparse", Typeflag: tar.TypeReg, Mode: 0o600, Size: size, ModTime: mtime}, data); err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte("x"), 4096)
	tw.Write(block)
	tw.Write(block)
	tw.Close()
	want := make([]byte, size)
	copy(want[1<<20:], block)
	copy(want[40<<20:], block)

	if _, err := s.CopyIn(ctx, "/vol/t", &in, nil); err != nil {
		t.Fatalf("CopyIn: %v", err)
	}
	r := execAndWait(t, s, sh(`cd /vol/t && stat -c '%n %i %h %Y' a b l && stat -c '%s %b' sparse && sha256sum sparse && cp -a /vol/t /tmp/t`))
	ino := strings.Fields(r.stdout)[1]
	wantOut := fmt.Sprintf("a %[1]s 2 %[2]d\nb %[1]s 2 %[2]d\nl %[3]s 1 %[2]d\n%[4]d 16\n%[5]x  sparse\n", ino, mtime.Unix(), strings.Fields(r.stdout)[9], size, sha256.Sum256(want))
	if r.stdout != wantOut {
		t.Errorf("the guest sees:\n%s\nwant (one file for a and b, 16 blocks for the data, l's time):\n%s%s", r.stdout, wantOut, r.stderr)
	}

	for _, dir := range []string{"/vol/t", "/tmp/t"} {
		var out bytes.Buffer
		if _, err := s.CopyOut(ctx, dir, &out); err != nil {
			t.Fatalf("CopyOut %s: %v", dir, err)
		}
		if out.Len() > 1<<20 {
			t.Errorf("CopyOut %s sent %d bytes for 8 KiB of data", dir, out.Len())
		}
		var got []string
		for _, e := range readArchive(t, &out) {
			got = append(got, fmt.Sprintf("%s %c %s %v", e.Name, e.Typeflag, e.Linkname, sparsetar.IsSparse(e.Header)))
			if e.Name == "t/sparse" && !bytes.Equal(e.content, want) {
				t.Errorf("CopyOut %s: the sparse file's content differs", dir)
			}
			if e.Name == "t/l" && !e.ModTime.Equal(mtime) && dir == "/vol/t" {
				t.Errorf("CopyOut %s: the symlink's time is %v, want %v", dir, e.ModTime, mtime)
			}
		}
		if want := "t/ 5  false|t/a 0  false|t/b 1 t/a false|t/l 2 a false|t/sparse 0  true"; strings.Join(got, "|") != want {
			t.Errorf("CopyOut %s:\n%s\nwant:\n%s", dir, strings.Join(got, "|"), want)
		}
	}
}

// archiveEntry is one entry of an archive CopyOut wrote.
type archiveEntry struct {
	*tar.Header
	content []byte
}

// readArchive returns r's entries in order.
func readArchive(t *testing.T, r io.Reader) []archiveEntry {
	t.Helper()
	var entries []archiveEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, archiveEntry{h, content})
	}
}
