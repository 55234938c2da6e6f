package blockdev

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/internal/hostfile"
)

// File is a Device backed by a regular host file (or a block device node).
type File struct {
	f        *os.File
	size     int64
	readOnly bool
}

var _ Device = (*File)(nil)
var _ Discarder = (*File)(nil)

// OpenFile opens the image at path. A read-only device refuses writes.
func OpenFile(path string, readOnly bool) (*File, error) {
	f, err := openImage(path, readOnly)
	if err != nil {
		return nil, fmt.Errorf("blockdev: open image: %w", err)
	}
	d, err := NewFile(f, readOnly)
	if err != nil {
		f.Close()
		return nil, err
	}
	return d, nil
}

// NewFile wraps an open file, a regular file or a block device, and locks
// it (see ErrInUse). The device owns f from now on: Close closes it.
func NewFile(f *os.File, readOnly bool) (*File, error) {
	if err := hostfile.Check(f, hostfile.Regular|hostfile.BlockDevice); err != nil {
		return nil, fmt.Errorf("blockdev: %w", err)
	}
	if err := lockImage(f, readOnly); err != nil {
		return nil, err
	}
	size, err := f.Seek(0, 2)
	if err != nil {
		return nil, fmt.Errorf("blockdev: size of %s: %w", f.Name(), err)
	}
	return &File{f: f, size: size, readOnly: readOnly}, nil
}

// ReadAt implements io.ReaderAt.
func (d *File) ReadAt(p []byte, off int64) (int, error) {
	if err := checkRange(off, len(p), d.size); err != nil {
		return 0, err
	}
	return d.f.ReadAt(p, off)
}

// WriteAt implements io.WriterAt.
func (d *File) WriteAt(p []byte, off int64) (int, error) {
	if d.readOnly {
		return 0, ErrReadOnly
	}
	if err := checkRange(off, len(p), d.size); err != nil {
		return 0, err
	}
	return d.f.WriteAt(p, off)
}

// Sync implements Device.Sync.
func (d *File) Sync() error {
	if d.readOnly {
		return nil
	}
	if err := unix.Fdatasync(int(d.f.Fd())); err != nil {
		return fmt.Errorf("blockdev: sync %s: %w", d.f.Name(), err)
	}
	return nil
}

// Size implements Device.Size.
func (d *File) Size() int64 { return d.size }

// Close implements Device.Close.
func (d *File) Close() error { return d.f.Close() }

// Discard implements Discarder by punching a hole into the file. Hosts that
// cannot punch holes keep the data; that is not an error.
func (d *File) Discard(off, length int64) error {
	if d.readOnly {
		return ErrReadOnly
	}
	if err := checkRange(off, 0, d.size); err != nil || length <= 0 {
		return err
	}
	err := unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		return nil
	}
	if err != nil {
		return fmt.Errorf("blockdev: punch hole in %s: %w", d.f.Name(), err)
	}
	return nil
}

var _ Zeroer = (*File)(nil)

// ZeroRange implements Zeroer: the range reads as zeros afterwards.
func (d *File) ZeroRange(off, length int64) error {
	if d.readOnly {
		return ErrReadOnly
	}
	err := unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, length)
	if err == nil {
		return nil
	}
	zero := make([]byte, 1<<20)
	for length > 0 {
		n := min(length, int64(len(zero)))
		if _, err := d.f.WriteAt(zero[:n], off); err != nil {
			return fmt.Errorf("blockdev: zero %s: %w", d.f.Name(), err)
		}
		off += n
		length -= n
	}
	return nil
}
