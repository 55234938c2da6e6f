// Package blockdev provides the block devices that ext4lite filesystems live
// on: a plain host file, an in-memory buffer, and a copy-on-write delta that
// layers a per-episode file over a read-only golden image. It also clones
// images, by reflink where the host filesystem supports it and by a delta
// otherwise.
//
// Devices are byte-addressed (ReadAt/WriteAt at any offset and length);
// ext4lite itself always transfers whole filesystem blocks except for file
// data at the edges of a write. All devices are safe for concurrent use.
package blockdev

import (
	"errors"
	"io"
)

// Device is the storage a filesystem lives on.
type Device interface {
	io.ReaderAt
	io.WriterAt

	// Sync makes every completed WriteAt durable.
	Sync() error

	// Size is the device size in bytes. It never changes.
	Size() int64

	// Close releases the device. It does not Sync.
	Close() error
}

// Discarder is implemented by devices that can give back the storage behind
// a byte range. After Discard the range's contents are undefined (a plain
// file reads zeros, a delta reads its golden again); the filesystem only
// discards blocks it has freed.
type Discarder interface {
	Discard(off, length int64) error
}

// ErrReadOnly is returned by WriteAt and Discard on a device opened
// read-only.
var ErrReadOnly = errors.New("blockdev: device is read-only")

// checkRange reports whether [off, off+n) lies within a device of size size.
func checkRange(off int64, n int, size int64) error {
	if off < 0 || int64(n) > size || off > size-int64(n) {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// Zeroer is implemented by devices that can make a range read as zeros
// cheaply (without writing them).
type Zeroer interface {
	ZeroRange(off, length int64) error
}
