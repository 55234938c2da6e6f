package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlusherFlushes(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "image"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fl := startFlusher(f)
	for range 3 {
		f.Write(make([]byte, 1<<20))
		fl.Kick()
	}
	if err := fl.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := fl.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestFlusherKeepsTheError checks a failed background flush is reported
// by Stop: the kernel reports a write error to one fsync only, so the
// caller's final fsync would not see it.
func TestFlusherKeepsTheError(t *testing.T) {
	// fdatasync on a pipe fails (EINVAL), as it would on a failing disk.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	fl := startFlusher(w)
	fl.Kick()
	for range 100 {
		fl.Kick() // coalesced with the first, never blocks
	}
	err = fl.Stop()
	if err == nil || !strings.Contains(err.Error(), "fdatasync") {
		t.Fatalf("Stop after a failed flush: %v", err)
	}
}
