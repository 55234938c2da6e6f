package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteIsWholeOrNothing: a fill that fails leaves the previous file
// and no temporary one; one that succeeds replaces it.
func TestWriteIsWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out")
	if err := os.WriteFile(path, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("source failed")
	err := Write(path, func(f *os.File) error {
		f.WriteString("half")
		return boom
	})
	if err != boom {
		t.Fatalf("Write = %v, want fill's error as is", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "previous" {
		t.Fatalf("after a failed fill the file holds %q", b)
	}
	if err := Write(path, func(f *os.File) error { _, err := f.WriteString("new"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("after Write the file holds %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("the directory holds %d entries, want only the file", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "out"), func(*os.File) error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Write into a missing directory = %v", err)
	}
}
