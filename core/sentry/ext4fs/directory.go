package ext4fs

import (
	"sync"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/ext4lite"
)

// directoryFD implements vfs.FileDescriptionImpl for directories. Its
// offsets are ext4lite's directory offsets, which stay valid while the
// directory changes.
//
// +stateify savable
type directoryFD struct {
	fileDescription
	vfs.DirectoryFileDescriptionDefaultImpl

	mu  sync.Mutex `state:"nosave"`
	off int64
}

var _ vfs.FileDescriptionImpl = (*directoryFD)(nil)

// Release implements vfs.FileDescriptionImpl.Release.
func (fd *directoryFD) Release(context.Context) {}

// IterDirents implements vfs.FileDescriptionImpl.IterDirents.
func (fd *directoryFD) IterDirents(ctx context.Context, cb vfs.IterDirentsCallback) error {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	d := fd.dentry()
	if d.removed.Load() {
		// A removed directory lists nothing, as on Linux.
		return nil
	}
	var cbErr error
	err := d.fs.fs.ReadDir(d.inode.ino, fd.off, func(e ext4lite.Dirent) bool {
		cbErr = cb.Handle(vfs.Dirent{Name: e.Name, Type: e.Type, Ino: uint64(e.Ino), NextOff: e.Next})
		if cbErr != nil {
			return false
		}
		fd.off = e.Next
		return true
	})
	if cbErr != nil {
		return cbErr
	}
	if err != nil {
		return errno(err)
	}
	d.InotifyWithParent(ctx, linux.IN_ACCESS, 0, vfs.PathEvent)
	return nil
}

// Seek implements vfs.FileDescriptionImpl.Seek.
func (fd *directoryFD) Seek(ctx context.Context, offset int64, whence int32) (int64, error) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	switch whence {
	case linux.SEEK_SET:
	case linux.SEEK_CUR:
		offset += fd.off
	default:
		return 0, linuxerr.EINVAL
	}
	if offset < 0 {
		return 0, linuxerr.EINVAL
	}
	fd.off = offset
	return offset, nil
}

// Sync implements vfs.FileDescriptionImpl.Sync.
func (fd *directoryFD) Sync(ctx context.Context, opts vfs.SyncOptions) error {
	i := fd.inode()
	if i.fs.vol.readOnly {
		return nil
	}
	return errno(i.fs.fs.Fsync(i.ino))
}
