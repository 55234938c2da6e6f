package sentry

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"testing"
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
