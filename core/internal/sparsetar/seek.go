package sparsetar

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// FileData returns the data of the first size bytes of the host file f,
// as SEEK_DATA and SEEK_HOLE find it: all of it on a file system without
// them.
func FileData(f *os.File, size int64) ([]Segment, error) {
	fd := int(f.Fd())
	var segs []Segment
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if errors.Is(err, unix.EINVAL) {
			return []Segment{{0, size}}, nil
		}
		if err != nil {
			return nil, &os.PathError{Op: "seek data", Path: f.Name(), Err: err}
		}
		if start >= size {
			break
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, &os.PathError{Op: "seek hole", Path: f.Name(), Err: err}
		}
		end = min(end, size)
		segs = addData(segs, start, end)
		off = end
	}
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	return segs, nil
}
