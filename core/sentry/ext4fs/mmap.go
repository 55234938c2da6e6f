package ext4fs

import (
	"io"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/hostarch"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/safemem"
	"gvisor.dev/gvisor/pkg/sentry/fsutil"
	"gvisor.dev/gvisor/pkg/sentry/memmap"
	"gvisor.dev/gvisor/pkg/sentry/pgalloc"
	"gvisor.dev/gvisor/pkg/sentry/usage"
)

// inode implements memmap.Mappable for regular files: mapped pages are
// read from the image into the sandbox's memory file on first access
// (fsutil.FileRangeSet), pages written through shared mappings are
// tracked (fsutil.DirtySet) and written back on fsync, sync, unmap and
// when the volume closes. Pages are dropped once no mapping covers them.
var _ memmap.Mappable = (*inode)(nil)

// maxReadahead bounds how much of the optional range one fault reads.
const maxReadahead = 256 << 10

// AddMapping implements memmap.Mappable.AddMapping.
func (i *inode) AddMapping(ctx context.Context, ms memmap.MappingSpace, ar hostarch.AddrRange, offset uint64, writable bool) error {
	i.mapsMu.Lock()
	defer i.mapsMu.Unlock()
	i.mappings.AddMapping(ms, ar, offset, writable)
	return nil
}

// RemoveMapping implements memmap.Mappable.RemoveMapping.
func (i *inode) RemoveMapping(ctx context.Context, ms memmap.MappingSpace, ar hostarch.AddrRange, offset uint64, writable bool) {
	i.mapsMu.Lock()
	defer i.mapsMu.Unlock()
	unmapped := i.mappings.RemoveMapping(ms, ar, offset, writable)
	if len(unmapped) == 0 {
		return
	}
	i.dataMu.Lock()
	defer i.dataMu.Unlock()
	for _, r := range unmapped {
		// Nothing can dirty these pages any more.
		i.dirty.AllowClean(r)
		if err := fsutil.SyncDirty(ctx, r, &i.cache, &i.dirty, uint64(i.size.Load()), i.fs.mf, i.writeBackAt); err != nil {
			i.noteWritebackErrorLocked(err)
		}
		i.cache.Drop(r, i.fs.mf)
		i.dirty.KeepClean(r)
	}
}

// CopyMapping implements memmap.Mappable.CopyMapping.
func (i *inode) CopyMapping(ctx context.Context, ms memmap.MappingSpace, srcAR, dstAR hostarch.AddrRange, offset uint64, writable bool) error {
	return i.AddMapping(ctx, ms, dstAR, offset, writable)
}

// Translate implements memmap.Mappable.Translate.
func (i *inode) Translate(ctx context.Context, required, optional memmap.MappableRange, at hostarch.AccessType) ([]memmap.Translation, error) {
	i.dataMu.Lock()
	defer i.dataMu.Unlock()

	// Pages past the end of the file cannot be translated (SIGBUS).
	size := uint64(i.size.Load())
	pgend := hostarch.MustPageRoundUp(size)
	beyondEOF := false
	if required.End > pgend {
		if required.Start >= pgend {
			return nil, &memmap.BusError{Err: io.EOF}
		}
		beyondEOF = true
		required.End = pgend
	}
	optional.End = min(optional.End, pgend)

	mf := i.fs.mf
	_, fillErr := i.cache.Fill(ctx, required, fillRange(required, optional), size, mf, pgalloc.AllocOpts{
		Kind:    usage.PageCache,
		MemCgID: pgalloc.MemoryCgroupIDFromContext(ctx),
		Mode:    pgalloc.AllocateAndWritePopulate,
	}, i.fillAt)

	var ts []memmap.Translation
	var translatedEnd uint64
	for seg := i.cache.FindSegment(required.Start); seg.Ok() && seg.Start() < required.End; seg, _ = seg.NextNonEmpty() {
		segMR := seg.Range().Intersect(optional)
		perms := hostarch.ReadExecute
		if at.Write {
			// The page can be dirtied through the mapping from now on.
			i.dirty.KeepDirty(segMR)
			perms.Write = true
		}
		ts = append(ts, memmap.Translation{
			Source: segMR,
			File:   mf,
			Offset: seg.FileRangeOf(segMR).Start,
			Perms:  perms,
		})
		translatedEnd = segMR.End
	}
	if translatedEnd < required.End && fillErr != nil {
		return ts, &memmap.BusError{Err: fillErr}
	}
	if beyondEOF {
		return ts, &memmap.BusError{Err: io.EOF}
	}
	return ts, nil
}

// fillRange limits optional to maxReadahead from required's start.
func fillRange(required, optional memmap.MappableRange) memmap.MappableRange {
	if required.Length() >= maxReadahead {
		return required
	}
	if optional.Length() <= maxReadahead {
		return optional
	}
	optional.Start = required.Start
	if optional.Length() > maxReadahead {
		optional.End = optional.Start + maxReadahead
	}
	return optional
}

// InvalidateUnsavable implements memmap.Mappable.InvalidateUnsavable.
func (i *inode) InvalidateUnsavable(ctx context.Context) error {
	i.mapsMu.Lock()
	defer i.mapsMu.Unlock()
	i.mappings.InvalidateAll(memmap.InvalidateOpts{})
	i.dataMu.Lock()
	defer i.dataMu.Unlock()
	if err := fsutil.SyncDirtyAll(ctx, &i.cache, &i.dirty, uint64(i.size.Load()), i.fs.mf, i.writeBackAt); err != nil {
		return err
	}
	i.cache.DropAll(i.fs.mf)
	i.dirty.RemoveAllAndAccount()
	return nil
}

// fillAt reads file data at offset into dsts for the page cache. Bytes
// past the image's end of file read as zeros.
func (i *inode) fillAt(ctx context.Context, dsts safemem.BlockSeq, offset uint64) (uint64, error) {
	b := getBuf()
	defer putBuf(b)
	buf := *b
	var done uint64
	for !dsts.IsEmpty() {
		n := min(uint64(len(buf)), dsts.NumBytes())
		got, err := i.readDisk(buf[:n], int64(offset+done))
		if err != nil {
			return done, err
		}
		clear(buf[got:n])
		c, err := safemem.CopySeq(dsts, safemem.BlockSeqOf(safemem.BlockFromSafeSlice(buf[:n])))
		done += c
		dsts = dsts.DropFirst64(c)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// writeBackAt writes cached pages to the image.
func (i *inode) writeBackAt(ctx context.Context, srcs safemem.BlockSeq, offset uint64) (uint64, error) {
	b := getBuf()
	defer putBuf(b)
	buf := *b
	n := min(uint64(len(buf)), srcs.NumBytes())
	c, err := safemem.CopySeq(safemem.BlockSeqOf(safemem.BlockFromSafeSlice(buf[:n])), srcs.TakeFirst64(n))
	if err != nil {
		return 0, err
	}
	w, err := i.fs.fs.WriteAt(i.ino, buf[:c], int64(offset))
	return uint64(w), errno(err)
}

// noteWritebackErrorLocked remembers the first writeback error for the
// next fsync.
//
// Preconditions: i.dataMu is held.
func (i *inode) noteWritebackErrorLocked(err error) {
	log.Warningf("ext4fs: writing back mapped data of inode %d: %v", i.ino, err)
	if i.wbErr == nil {
		i.wbErr = err
	}
}

// writeback writes i's dirty cached pages to the image and returns (and
// clears) any writeback error since the last call.
func (i *inode) writeback(ctx context.Context) error {
	i.dataMu.Lock()
	defer i.dataMu.Unlock()
	if err := fsutil.SyncDirtyAll(ctx, &i.cache, &i.dirty, uint64(i.size.Load()), i.fs.mf, i.writeBackAt); err != nil {
		i.noteWritebackErrorLocked(err)
	}
	err := i.wbErr
	i.wbErr = nil
	return err
}

// dropCache writes back and frees i's cached pages, when the inode is
// forgotten.
func (i *inode) dropCache(ctx context.Context) {
	i.dataMu.Lock()
	defer i.dataMu.Unlock()
	if i.cache.IsEmpty() {
		return
	}
	if err := fsutil.SyncDirtyAll(ctx, &i.cache, &i.dirty, uint64(i.size.Load()), i.fs.mf, i.writeBackAt); err != nil {
		i.noteWritebackErrorLocked(err)
	}
	i.cache.DropAll(i.fs.mf)
	i.dirty.RemoveAllAndAccount()
}

// writebackAll writes back the dirty pages of every mapped file.
func (fs *filesystem) writebackAll(ctx context.Context) error {
	fs.inodesMu.Lock()
	var mapped []*inode
	for _, i := range fs.inodes {
		if i.ftype != linux.S_IFREG {
			continue
		}
		i.refs++
		mapped = append(mapped, i)
	}
	fs.inodesMu.Unlock()
	var first error
	for _, i := range mapped {
		if err := i.writeback(ctx); err != nil && first == nil {
			first = err
		}
		i.decRef(ctx)
	}
	return first
}
