package ext4fs

import (
	"sync"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/memmap"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/usermem"
)

// regularFileFD implements vfs.FileDescriptionImpl for regular files.
//
// +stateify savable
type regularFileFD struct {
	fileDescription

	offMu sync.Mutex `state:"nosave"`
	off   int64
}

var _ vfs.FileDescriptionImpl = (*regularFileFD)(nil)

// Release implements vfs.FileDescriptionImpl.Release.
func (fd *regularFileFD) Release(context.Context) {}

// supportedRWFlags are the preadv2/pwritev2 flags honoured.
const supportedRWFlags = linux.RWF_HIPRI | linux.RWF_DSYNC | linux.RWF_SYNC

// PRead implements vfs.FileDescriptionImpl.PRead.
func (fd *regularFileFD) PRead(ctx context.Context, dst usermem.IOSequence, offset int64, opts vfs.ReadOptions) (int64, error) {
	if offset < 0 {
		return 0, linuxerr.EINVAL
	}
	if opts.Flags&^supportedRWFlags != 0 {
		return 0, linuxerr.EOPNOTSUPP
	}
	if dst.NumBytes() == 0 {
		return 0, nil
	}
	return fd.inode().read(ctx, dst, offset)
}

// Read implements vfs.FileDescriptionImpl.Read.
func (fd *regularFileFD) Read(ctx context.Context, dst usermem.IOSequence, opts vfs.ReadOptions) (int64, error) {
	fd.offMu.Lock()
	defer fd.offMu.Unlock()
	n, err := fd.PRead(ctx, dst, fd.off, opts)
	fd.off += n
	return n, err
}

// PWrite implements vfs.FileDescriptionImpl.PWrite.
func (fd *regularFileFD) PWrite(ctx context.Context, src usermem.IOSequence, offset int64, opts vfs.WriteOptions) (int64, error) {
	n, _, err := fd.pwrite(ctx, src, offset, opts)
	return n, err
}

// Write implements vfs.FileDescriptionImpl.Write.
func (fd *regularFileFD) Write(ctx context.Context, src usermem.IOSequence, opts vfs.WriteOptions) (int64, error) {
	fd.offMu.Lock()
	defer fd.offMu.Unlock()
	n, off, err := fd.pwrite(ctx, src, fd.off, opts)
	fd.off = off
	return n, err
}

// pwrite writes src at offset (or at the end for O_APPEND) and returns the
// bytes written and the offset after them.
func (fd *regularFileFD) pwrite(ctx context.Context, src usermem.IOSequence, offset int64, opts vfs.WriteOptions) (int64, int64, error) {
	if offset < 0 {
		return 0, offset, linuxerr.EINVAL
	}
	if opts.Flags&^supportedRWFlags != 0 {
		return 0, offset, linuxerr.EOPNOTSUPP
	}
	if src.NumBytes() == 0 {
		return 0, offset, nil
	}
	i := fd.inode()
	appending := fd.vfsfd.StatusFlags()&linux.O_APPEND != 0
	n, off, err := i.write(ctx, src, offset, appending)
	if n > 0 {
		if cerr := i.clearSetIDOnChange(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err == nil && (fd.vfsfd.StatusFlags()&(linux.O_DSYNC|linux.O_SYNC) != 0 || opts.Flags&(linux.RWF_DSYNC|linux.RWF_SYNC) != 0) {
		err = errno(i.fs.fs.Fsync(i.ino))
	}
	return n, off, err
}

// Seek implements vfs.FileDescriptionImpl.Seek.
func (fd *regularFileFD) Seek(ctx context.Context, offset int64, whence int32) (int64, error) {
	fd.offMu.Lock()
	defer fd.offMu.Unlock()
	size := fd.inode().size.Load()
	switch whence {
	case linux.SEEK_SET:
	case linux.SEEK_CUR:
		offset += fd.off
	case linux.SEEK_END:
		offset += size
	case linux.SEEK_DATA:
		// The whole file counts as data.
		if offset < 0 || offset >= size {
			return 0, linuxerr.ENXIO
		}
	case linux.SEEK_HOLE:
		if offset < 0 || offset >= size {
			return 0, linuxerr.ENXIO
		}
		offset = size
	default:
		return 0, linuxerr.EINVAL
	}
	if offset < 0 {
		return 0, linuxerr.EINVAL
	}
	fd.off = offset
	return offset, nil
}

// Allocate implements vfs.FileDescriptionImpl.Allocate.
func (fd *regularFileFD) Allocate(ctx context.Context, mode, offset, length uint64) error {
	mnt := fd.vfsfd.Mount()
	if err := mnt.CheckBeginWrite(); err != nil {
		return err
	}
	defer mnt.EndWrite()
	return fd.inode().allocate(ctx, mode, offset, length)
}

// Sync implements vfs.FileDescriptionImpl.Sync.
func (fd *regularFileFD) Sync(ctx context.Context, opts vfs.SyncOptions) error {
	i := fd.inode()
	if err := i.writeback(ctx); err != nil {
		return err
	}
	if i.fs.vol.readOnly {
		return nil
	}
	return errno(i.fs.fs.Fsync(i.ino))
}

// ConfigureMMap implements vfs.FileDescriptionImpl.ConfigureMMap.
func (fd *regularFileFD) ConfigureMMap(ctx context.Context, opts *memmap.MMapOpts) error {
	opts.SentryOwnedContent = true
	return vfs.GenericConfigureMMap(&fd.vfsfd, fd.inode(), opts)
}

// IsVolumeFile reports whether fd is a regular file of an ext4 volume,
// whose Allocate implements fallocate(2)'s modes (KEEP_SIZE, PUNCH_HOLE,
// ZERO_RANGE).
func IsVolumeFile(fd *vfs.FileDescription) bool {
	_, ok := fd.Impl().(*regularFileFD)
	return ok
}
