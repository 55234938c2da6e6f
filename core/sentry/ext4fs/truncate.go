package ext4fs

import (
	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/hostarch"
	"gvisor.dev/gvisor/pkg/sentry/fsutil"
	"gvisor.dev/gvisor/pkg/sentry/memmap"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// truncateForOpen implements open(O_TRUNC): the file becomes empty and,
// as Linux's do_truncate, loses its set-user-ID bits.
func (i *inode) truncateForOpen(ctx context.Context, mnt *vfs.Mount) error {
	if err := mnt.CheckBeginWrite(); err != nil {
		return err
	}
	defer mnt.EndWrite()
	i.ioMu.Lock()
	err := i.truncateLocked(ctx, 0)
	i.ioMu.Unlock()
	if err != nil {
		return err
	}
	return i.clearSetIDOnChange(ctx)
}

// truncateLocked sets the file's size.
//
// Preconditions: i.ioMu is held; i is a regular file.
func (i *inode) truncateLocked(ctx context.Context, newSize int64) error {
	if newSize < 0 {
		return linuxerr.EINVAL
	}
	i.dataMu.Lock()
	old := i.size.Load()
	if newSize >= old {
		i.zeroCachedLocked(old, newSize)
		err := i.fs.fs.Truncate(i.ino, newSize)
		if err == nil {
			i.size.Store(newSize)
		}
		i.dataMu.Unlock()
		return errno(err)
	}
	// Shrinking: from now on Translate refuses pages past newSize, the
	// cache loses them, then the image does; mappings of them go last.
	i.size.Store(newSize)
	oldEnd := hostarch.MustPageRoundUp(uint64(old))
	newEnd := hostarch.MustPageRoundUp(uint64(newSize))
	i.cache.Truncate(uint64(newSize), i.fs.mf)
	if newEnd < oldEnd {
		i.dirty.KeepClean(memmap.MappableRange{Start: newEnd, End: oldEnd})
	}
	err := i.fs.fs.Truncate(i.ino, newSize)
	if err != nil {
		// The image keeps the old size and data; the cache refills.
		i.size.Store(old)
	}
	i.dataMu.Unlock()
	if newEnd < oldEnd {
		i.mapsMu.Lock()
		i.mappings.Invalidate(memmap.MappableRange{Start: newEnd, End: oldEnd}, memmap.InvalidateOpts{InvalidatePrivate: true})
		i.mapsMu.Unlock()
	}
	return errno(err)
}

// allocate implements fallocate(2) for regular files.
func (i *inode) allocate(ctx context.Context, mode, off, length uint64) error {
	const keep, punch, zero = linux.FALLOC_FL_KEEP_SIZE, linux.FALLOC_FL_PUNCH_HOLE, linux.FALLOC_FL_ZERO_RANGE
	if mode&^(keep|punch|zero) != 0 {
		return linuxerr.EOPNOTSUPP
	}
	if mode&punch != 0 && (mode&keep == 0 || mode&zero != 0) {
		return linuxerr.EOPNOTSUPP
	}
	end := off + length
	if int64(off) < 0 || int64(end) < 0 || end < off {
		return linuxerr.EFBIG
	}
	if mode&keep == 0 {
		if limit, err := vfs.CheckLimit(ctx, int64(off), int64(length)); err != nil {
			return err
		} else if limit < int64(length) {
			return linuxerr.ErrExceedsFileSizeLimit
		}
	}
	i.ioMu.Lock()
	defer i.ioMu.Unlock()

	i.dataMu.Lock()
	old := i.size.Load()
	var dropped memmap.MappableRange
	if mode&(punch|zero) != 0 {
		// The range reads as zeros afterwards: write back the dirty
		// pages around it, then drop the cached pages it touches so they
		// are read again.
		dropped = memmap.MappableRange{Start: hostarch.PageRoundDown(off), End: min(hostarch.MustPageRoundUp(end), hostarch.MustPageRoundUp(uint64(old)))}
		if dropped.Start < dropped.End {
			if err := fsutil.SyncDirty(ctx, dropped, &i.cache, &i.dirty, uint64(old), i.fs.mf, i.writeBackAt); err != nil {
				i.dataMu.Unlock()
				return err
			}
			i.cache.Drop(dropped, i.fs.mf)
			i.dirty.KeepClean(dropped)
		}
	}
	if mode&keep == 0 && int64(end) > old {
		i.zeroCachedLocked(old, int64(end))
	}
	err := i.fs.fs.Fallocate(i.ino, uint32(mode), int64(off), int64(length))
	if err == nil && mode&keep == 0 && int64(end) > old {
		i.size.Store(int64(end))
	}
	i.dataMu.Unlock()
	if dropped.Start < dropped.End {
		i.mapsMu.Lock()
		i.mappings.Invalidate(dropped, memmap.InvalidateOpts{})
		i.mapsMu.Unlock()
	}
	return errno(err)
}
