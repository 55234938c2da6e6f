// Package atomicfile writes a host file whole or not at all.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write has fill write a new temporary file beside path (hidden, in the
// same directory, so the rename cannot cross file systems) and renames it
// over path once fill and the close succeeded. On any failure the
// temporary file is removed and path is left as it was; the error is
// fill's, or the file system's, unwrapped.
func Write(path string, fill func(f *os.File) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
