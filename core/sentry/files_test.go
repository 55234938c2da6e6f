package sentry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
)

func TestFiles(t *testing.T) {
	ctx := context.Background()
	s := newSandbox(t, Config{})

	// Before Start: the image is readable and the upper layer writable.
	got, err := s.ReadFile(ctx, "/etc/gvx-marker")
	if err != nil || string(got) != "gvx test image\n" {
		t.Fatalf("ReadFile marker: %q %v", got, err)
	}
	if err := s.WriteFile(ctx, "/etc/from-host", []byte("written by host\n"), 0o640); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	fi, err := s.Stat(ctx, "/etc/from-host")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != 16 || fi.Mode() != 0o640 || fi.IsDir() || fi.Name() != "from-host" {
		t.Errorf("Stat: size %d mode %v dir %v name %q", fi.Size(), fi.Mode(), fi.IsDir(), fi.Name())
	}
	if st := fi.Sys().(*FileStat); st.UID != 0 || st.Nlink != 1 {
		t.Errorf("Stat sys: %+v", st)
	}

	startIdle(t, s)
	r := execAndWait(t, s, sh(`cat /etc/from-host; echo from-guest > /root/g; ln -s /root/g /tmp/link; mkfifo /tmp/fifo`))
	if r.stdout != "written by host\n" {
		t.Fatalf("guest read %q %q", r.stdout, r.stderr)
	}
	got, err = s.ReadFile(ctx, "/tmp/link") // symlink resolved inside the guest
	if err != nil || string(got) != "from-guest\n" {
		t.Fatalf("ReadFile via symlink: %q %v", got, err)
	}
	if fi, err := s.Stat(ctx, "/"); err != nil || !fi.IsDir() {
		t.Errorf("Stat /: %v %v", fi, err)
	}
	if fi, err := s.Stat(ctx, "/dev/null"); err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
		t.Errorf("Stat /dev/null: %v %v", fi, err)
	}
	// /proc files are regular and readable.
	if got, err := s.ReadFile(ctx, "/proc/1/cmdline"); err != nil || string(got) != "/bin/sleep\x001000000\x00" {
		t.Errorf("ReadFile /proc/1/cmdline: %q %v", got, err)
	}

	for _, bad := range []string{"relative", "/etc/../no/such", "/dev/zero", "/tmp/fifo", "/etc"} {
		if _, err := s.ReadFile(ctx, bad); err == nil {
			t.Errorf("ReadFile(%q) succeeded", bad)
		}
	}
	if _, err := s.Stat(ctx, "/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat missing: %v, want ErrNotExist", err)
	}

	f, err := s.Open(ctx, "/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 4)
	if _, err := io.ReadFull(f, head); err != nil || string(head) != "\x7fELF" {
		t.Errorf("busybox head %q %v", head, err)
	}
	f.Close()
}

func TestFilesAfterClose(t *testing.T) {
	s := newSandbox(t, Config{})
	f, err := s.Open(context.Background(), "/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := f.Read(make([]byte, 10)); !errors.Is(err, fs.ErrClosed) {
		t.Errorf("Read of a file open across Close: %v, want fs.ErrClosed", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("File.Close after sandbox Close: %v", err)
	}
	if _, err := s.ReadFile(context.Background(), "/etc/passwd"); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReadFile after Close: %v, want ErrClosed", err)
	}
}

// TestWriteFileReplacesWhole writes onto the root's writable layer (over
// the image's files too) and onto an ext4lite volume, which implement
// renames and unlinks separately.
func TestWriteFileReplacesWhole(t *testing.T) {
	t.Run("root", func(t *testing.T) {
		s := newSandbox(t, Config{})
		testWriteFileReplacesWhole(t, s, "/work")
		// A file of the image (the overlay's lower layer) is replaced too.
		if err := s.WriteFile(context.Background(), "/etc/gvx-marker", []byte("replaced\n"), 0o600); err != nil {
			t.Fatalf("WriteFile over the image's file: %v", err)
		}
		if got, err := s.ReadFile(context.Background(), "/etc/gvx-marker"); err != nil || string(got) != "replaced\n" {
			t.Errorf("the image's file after WriteFile: %q %v", got, err)
		}
	})
	t.Run("volume", func(t *testing.T) {
		img := newTestVolume(t, volumeDir(t), 16<<20)
		s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/work"}}})
		testWriteFileReplacesWhole(t, s, "/work")

		// A full volume: the old file stays, and the space of the
		// partial one comes back.
		ctx := context.Background()
		_, err := s.WriteFileFrom(ctx, "/work/f", io.LimitReader(zeros{}, 32<<20), 0o644, nil)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("writing 32 MiB to a 16 MiB volume: %v, want ENOSPC", err)
		}
		checkFile(t, s, "/work/f", "via link\n", "644")
		checkNoTemporaries(t, s, "/work")
		if _, err := s.WriteFileFrom(ctx, "/work/g", io.LimitReader(zeros{}, 8<<20), 0o644, nil); err != nil {
			t.Errorf("8 MiB after the failed write: %v (its blocks were not freed)", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		checkImageClean(t, img)
	})
}

func testWriteFileReplacesWhole(t *testing.T, s *Sandbox, work string) {
	ctx := context.Background()
	startIdle(t, s)
	if err := s.MkdirAll(ctx, work, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFile(ctx, work+"/f", []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A source that fails midway leaves the old file, or none.
	errSource := errors.New("the source broke")
	failing := func() io.Reader {
		return io.MultiReader(bytes.NewReader(bytes.Repeat([]byte("x"), 300<<10)), iotest.ErrReader(errSource))
	}
	if n, err := s.WriteFileFrom(ctx, work+"/f", failing(), 0o644, nil); !errors.Is(err, errSource) || n != 300<<10 {
		t.Errorf("WriteFileFrom of a failing source: %d bytes, %v; want 300 KiB and its error", n, err)
	}
	checkFile(t, s, work+"/f", "old\n", "600")
	if _, err := s.WriteFileFrom(ctx, work+"/absent", failing(), 0o644, nil); !errors.Is(err, errSource) {
		t.Errorf("WriteFileFrom of a failing source to a new file: %v", err)
	}
	if _, err := s.Stat(ctx, work+"/absent"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed write left %s: %v", work+"/absent", err)
	}
	checkNoTemporaries(t, s, work)

	// A write that succeeds replaces the file: the new mode, and a hard
	// link to the old file keeps the old content.
	execAndWait(t, s, sh(`cd `+work+` && ln f hard`))
	if err := s.WriteFile(ctx, work+"/f", []byte("new\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	checkFile(t, s, work+"/f", "new\n", "640")
	checkFile(t, s, work+"/hard", "old\n", "600")

	// Symlinks are followed as open(2) follows them: a relative target
	// from the directory the link is in, which a symlink reached here.
	execAndWait(t, s, sh(`cd `+work+` && ln -s f link && ln -s made dangling && mkdir -p a/b && ln -s a/b ab && ln -s ../g a/b/rel && ln -s loop1 loop2 && ln -s loop2 loop1 && mkfifo fifo && mkdir dir`))
	for name, content := range map[string]string{"link": "via link\n", "dangling": "made\n", "ab/rel": "relative\n"} {
		if err := s.WriteFile(ctx, work+"/"+name, []byte(content), 0o644); err != nil {
			t.Errorf("WriteFile %s: %v", name, err)
		}
	}
	r := execAndWait(t, s, sh(`cd `+work+` && cat f made a/g && for l in link dangling a/b/rel; do readlink $l; done && ls g 2>&1`))
	if want := "via link\nmade\nrelative\nf\nmade\n../g\nls: g: No such file or directory\n"; r.stdout != want {
		t.Errorf("after writing through symlinks:\n%s\nwant:\n%s%s", r.stdout, want, r.stderr)
	}

	// What is not a regular file is refused, and stays.
	for name, want := range map[string]string{
		work + "/fifo":   "not a regular file",
		"/dev/null":      "not a regular file",
		work + "/dir":    "is a directory",
		"/":              "is a directory",
		work + "/loop1":  "too many levels of symbolic links",
		work + "/f/x":    "not a directory",
		"/no/such/dir/f": "no such file or directory",
	} {
		if err := s.WriteFile(ctx, name, []byte("x"), 0o644); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("WriteFile %s: %v, want an error saying %q", name, err, want)
		}
	}
	if r := execAndWait(t, s, sh(`cd `+work+` && stat -c %F fifo dir && cat /dev/null`)); r.stdout != "fifo\ndirectory\n" {
		t.Errorf("after the refused writes: %q %q", r.stdout, r.stderr)
	}
	checkNoTemporaries(t, s, work)
}

// checkFile checks a guest file's content and mode, as the guest sees them.
func checkFile(t *testing.T, s *Sandbox, name, content, mode string) {
	t.Helper()
	r := execAndWait(t, s, sh(`cat `+name+` && stat -c %a `+name))
	if got := r.stdout; got != content+mode+"\n" {
		if len(got) > 64 {
			got = fmt.Sprintf("%q… (%d bytes)", got[:64], len(got))
		}
		t.Errorf("%s holds %s %q, want %q and mode %s", name, got, r.stderr, content, mode)
	}
}

// checkNoTemporaries checks that no write left its hidden file in dir.
func checkNoTemporaries(t *testing.T, s *Sandbox, dir string) {
	t.Helper()
	if r := execAndWait(t, s, sh(`ls -A `+dir)); strings.Contains(r.stdout, ".gvx-") {
		t.Errorf("%s holds a write's temporary file:\n%s", dir, r.stdout)
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func TestWriteFileOwner(t *testing.T) {
	ctx := context.Background()
	s := newSandbox(t, Config{})
	startIdle(t, s)
	agent := &Owner{UID: 1000, GID: 100}
	if err := s.MkdirAll(ctx, "/tmp/made/for/agent", agent); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteFileFrom(ctx, "/tmp/made/for/agent/task", strings.NewReader("task\n"), 0o640, agent); err != nil {
		t.Fatal(err)
	}
	// The directory the guest made before keeps its owner; so does root's
	// file replaced by root.
	execAndWait(t, s, sh(`echo old > /tmp/made/theirs && chown 1000:1000 /tmp/made/theirs`))
	if err := s.WriteFile(ctx, "/tmp/made/theirs", []byte("root's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := execAndWait(t, s, sh(`cd /tmp && stat -c '%n %u:%g %a' . made made/for made/for/agent made/for/agent/task made/theirs`))
	want := `. 0:0 1777
made 1000:100 755
made/for 1000:100 755
made/for/agent 1000:100 755
made/for/agent/task 1000:100 640
made/theirs 0:0 644
`
	if r.stdout != want {
		t.Errorf("the guest sees:\n%s\nwant:\n%s%s", r.stdout, want, r.stderr)
	}
	// The owner can use the file as theirs.
	spec := sh(`echo more >> /tmp/made/for/agent/task && cat /tmp/made/for/agent/task`)
	spec.UID, spec.GID = 1000, 100
	if r := execAndWait(t, s, spec); r.stdout != "task\nmore\n" {
		t.Errorf("uid 1000 appending to its file: %q %q", r.stdout, r.stderr)
	}
}
