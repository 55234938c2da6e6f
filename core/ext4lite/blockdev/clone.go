package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/cleanup"
)

// CloneMethod says how Clone made an episode.
type CloneMethod int

const (
	// CloneReflink: the episode is a standalone image sharing extents with
	// the golden through the host filesystem (FICLONE).
	CloneReflink CloneMethod = iota + 1
	// CloneDelta: the episode is a delta file over the read-only golden.
	CloneDelta
)

// String implements fmt.Stringer.
func (m CloneMethod) String() string {
	switch m {
	case CloneReflink:
		return "reflink"
	case CloneDelta:
		return "delta"
	default:
		return fmt.Sprintf("CloneMethod(%d)", int(m))
	}
}

// Clone makes episodePath a writable copy of the image at goldenPath in
// O(1): a reflink when the host filesystem supports FICLONE, a delta file
// otherwise. episodePath must not exist. The golden is only ever read.
func Clone(goldenPath, episodePath string) (CloneMethod, error) {
	abs, err := filepath.Abs(goldenPath)
	if err != nil {
		return 0, fmt.Errorf("blockdev: %w", err)
	}
	golden, err := openImage(abs, true)
	if err != nil {
		return 0, fmt.Errorf("blockdev: open golden: %w", err)
	}
	defer golden.Close()
	// A golden being written would give a clone of no consistent state.
	if err := lockImage(golden, true); err != nil {
		return 0, err
	}
	// Cloning a delta would chain deltas; refuse instead of silently
	// reading the delta file as an image.
	head := make([]byte, len(deltaMagic))
	if n, _ := golden.ReadAt(head, 0); n == len(head) && isDeltaHeader(head) {
		return 0, fmt.Errorf("blockdev: %s is a delta, not an image: flatten it first", goldenPath)
	}
	ep, err := os.OpenFile(episodePath, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("blockdev: create episode: %w", err)
	}
	cu := cleanup.Make(func() {
		ep.Close()
		os.Remove(episodePath)
	})
	defer cu.Clean()

	method, err := cloneInto(golden, abs, ep)
	if err != nil {
		return 0, err
	}
	if err := ep.Close(); err != nil {
		return 0, fmt.Errorf("blockdev: close episode: %w", err)
	}
	cu.Release()
	return method, nil
}

// cloneInto fills the empty file ep from golden.
func cloneInto(golden *os.File, goldenPath string, ep *os.File) (CloneMethod, error) {
	err := unix.IoctlFileClone(int(ep.Fd()), int(golden.Fd()))
	if err == nil {
		return CloneReflink, nil
	}
	if !reflinkUnsupported(err) {
		return 0, fmt.Errorf("blockdev: reflink %s: %w", goldenPath, err)
	}
	id, err := identify(golden)
	if err != nil {
		return 0, err
	}
	hdr, err := newDeltaHeader(id, goldenPath)
	if err != nil {
		return 0, err
	}
	if err := initDeltaFile(ep, hdr); err != nil {
		return 0, err
	}
	return CloneDelta, nil
}

// reflinkUnsupported reports whether a FICLONE error means "this host cannot
// reflink these files" rather than a real failure.
func reflinkUnsupported(err error) bool {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case unix.EOPNOTSUPP, unix.ENOTTY, unix.EXDEV, unix.EINVAL, unix.ENOSYS, unix.EPERM:
		return true
	}
	return false
}

// Open opens an image or a delta at path, telling them apart by the delta
// magic. For a delta the golden path recorded in it is used.
func Open(path string, readOnly bool) (Device, error) {
	f, err := openImage(path, true)
	if err != nil {
		return nil, fmt.Errorf("blockdev: open: %w", err)
	}
	head := make([]byte, len(deltaMagic))
	n, _ := f.ReadAt(head, 0)
	f.Close()
	if n == len(head) && isDeltaHeader(head) {
		return OpenDelta(path, "", readOnly)
	}
	return OpenFile(path, readOnly)
}

// IsDelta reports whether the file at path is a delta.
func IsDelta(path string) (bool, error) {
	f, err := openImage(path, true)
	if err != nil {
		return false, fmt.Errorf("blockdev: %w", err)
	}
	defer f.Close()
	head := make([]byte, len(deltaMagic))
	n, _ := f.ReadAt(head, 0)
	return n == len(head) && isDeltaHeader(head), nil
}
