package hostfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "file")
	if err := os.WriteFile(reg, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(reg, os.O_RDWR, Regular)
	if err != nil {
		t.Fatal(err)
	}
	// The descriptor is handed on blocking, like any os.OpenFile's.
	if fl, _ := fcntlFlags(f); fl&syscall.O_NONBLOCK != 0 {
		t.Error("the descriptor kept O_NONBLOCK")
	}
	f.Close()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reg, link); err != nil {
		t.Fatal(err)
	}
	if f, err := Open(link, os.O_RDONLY, Regular); err != nil {
		t.Errorf("a symlink to a file: %v", err)
	} else {
		f.Close()
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, want string
		kinds      Kinds
	}{
		{fifo, "is a named pipe (FIFO); only a regular file can be used here", Regular},
		{fifo, "only a regular file or a block device", Regular | BlockDevice},
		{dir, "is a directory", Regular},
		{"/dev/null", "is a character device", Regular | BlockDevice},
	} {
		done := make(chan error, 1)
		go func() {
			f, err := Open(c.path, os.O_RDWR, c.kinds)
			if err == nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrKind) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Open(%s): %v, want ErrKind saying %q", c.path, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Open(%s) blocked", c.path)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing"), os.O_RDONLY, Regular); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}

func fcntlFlags(f *os.File) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

func TestCheckPath(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "file")
	if err := os.WriteFile(reg, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := CheckPath(reg, Regular); err != nil {
		t.Errorf("a regular file: %v", err)
	}
	if err := CheckPath(dir, Regular); !errors.Is(err, ErrKind) || !strings.Contains(err.Error(), dir+" is a directory") {
		t.Errorf("a directory: %v, want ErrKind naming it", err)
	}
	if err := CheckPath(filepath.Join(dir, "missing"), Regular); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v", err)
	}
}
