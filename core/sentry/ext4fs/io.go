package ext4fs

import (
	"errors"
	"io"
	"sync"

	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/hostarch"
	"gvisor.dev/gvisor/pkg/safemem"
	"gvisor.dev/gvisor/pkg/sentry/memmap"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
	"gvisor.dev/gvisor/pkg/usermem"
)

// ioChunk is the largest piece of file data moved at once between guest
// memory and ext4lite.
const ioChunk = 1 << 20

var bufPool = sync.Pool{New: func() any {
	b := make([]byte, ioChunk)
	return &b
}}

func getBuf() *[]byte  { return bufPool.Get().(*[]byte) }
func putBuf(b *[]byte) { bufPool.Put(b) }

// read copies file data from offset off to dst, up to the end of the
// file. Like every gVisor read, it returns io.EOF with a short count when
// it reaches the end.
func (i *inode) read(ctx context.Context, dst usermem.IOSequence, off int64) (int64, error) {
	b := getBuf()
	defer putBuf(b)
	buf := *b
	var done int64
	for dst.NumBytes() > 0 {
		size := i.size.Load()
		if off >= size {
			return done, io.EOF
		}
		n := min(int64(len(buf)), dst.NumBytes(), size-off)
		got, err := i.readAt(buf[:n], off)
		if got > 0 {
			c, cerr := dst.CopyOut(ctx, buf[:got])
			done += int64(c)
			off += int64(c)
			dst = dst.DropFirst(c)
			if cerr != nil {
				return done, cerr
			}
		}
		if err != nil {
			return done, err
		}
		if int64(got) < n {
			return done, io.EOF
		}
	}
	return done, nil
}

// readAt reads file data at off into p: from the page cache where the file
// is cached (mapped pages may be newer than the image), from ext4lite
// elsewhere. It returns less than len(p) only at the end of the file.
func (i *inode) readAt(p []byte, off int64) (int, error) {
	i.dataMu.Lock()
	if i.cache.IsEmpty() {
		i.dataMu.Unlock()
		return i.readDisk(p, off)
	}
	defer i.dataMu.Unlock()
	start, end := uint64(off), uint64(off)+uint64(len(p))
	pos := start
	for pos < end {
		if seg := i.cache.FindSegment(pos); seg.Ok() {
			segEnd := min(seg.End(), end)
			ims, err := i.fs.mf.MapInternal(seg.FileRangeOf(memmap.MappableRange{Start: pos, End: segEnd}), hostarch.Read)
			if err != nil {
				return int(pos - start), err
			}
			n, err := safemem.CopySeq(safemem.BlockSeqOf(safemem.BlockFromSafeSlice(p[pos-start:segEnd-start])), ims)
			pos += n
			if err != nil {
				return int(pos - start), err
			}
			continue
		}
		gapEnd := end
		if next := i.cache.LowerBoundSegment(pos); next.Ok() {
			gapEnd = min(next.Start(), end)
		}
		n, err := i.readDisk(p[pos-start:gapEnd-start], int64(pos))
		pos += uint64(n)
		if err != nil || pos < gapEnd {
			return int(pos - start), err
		}
	}
	return int(pos - start), nil
}

// readDisk reads from the image; a short read means the end of the file.
func (i *inode) readDisk(p []byte, off int64) (int, error) {
	n, err := i.fs.fs.ReadAt(i.ino, p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, errno(err)
}

// write copies src to the file at off (at the end with appending set) and
// returns the bytes written and the offset after them.
//
// Preconditions: the caller checked that the file is writable.
func (i *inode) write(ctx context.Context, src usermem.IOSequence, off int64, appending bool) (int64, int64, error) {
	i.ioMu.Lock()
	defer i.ioMu.Unlock()
	if appending {
		off = i.size.Load()
	}
	limit, err := vfs.CheckLimit(ctx, off, src.NumBytes())
	if err != nil {
		return 0, off, err
	}
	src = src.TakeFirst64(limit)
	b := getBuf()
	defer putBuf(b)
	buf := *b
	var done int64
	for src.NumBytes() > 0 {
		n := min(int64(len(buf)), src.NumBytes())
		c, cerr := src.CopyIn(ctx, buf[:n])
		if c > 0 {
			w, err := i.writeAt(buf[:c], off)
			done += int64(w)
			off += int64(w)
			src = src.DropFirst(w)
			if err != nil {
				return done, off, err
			}
		}
		if cerr != nil {
			return done, off, cerr
		}
	}
	return done, off, nil
}

// writeAt writes p to the image at off and updates cached pages.
//
// Preconditions: i.ioMu is held.
func (i *inode) writeAt(p []byte, off int64) (int, error) {
	i.dataMu.Lock()
	defer i.dataMu.Unlock()
	old := i.size.Load()
	cached := !i.cache.IsEmpty()
	if cached && off > old {
		// Bytes of the old last page past the old end of file may hold
		// stores through a mapping; they must read as zeros now.
		i.zeroCachedLocked(old, off)
	}
	n, err := i.fs.fs.WriteAt(i.ino, p, off)
	if n > 0 {
		if end := off + int64(n); end > old {
			i.size.Store(end)
		}
		if cached {
			i.copyToCacheLocked(p[:n], off)
		}
	}
	return n, errno(err)
}

// copyToCacheLocked copies p into the cached pages at off, keeping them
// coherent with a write that went to the image.
//
// Preconditions: i.dataMu is held.
func (i *inode) copyToCacheLocked(p []byte, off int64) {
	start, end := uint64(off), uint64(off)+uint64(len(p))
	for seg := i.cache.LowerBoundSegment(start); seg.Ok() && seg.Start() < end; seg = seg.NextSegment() {
		r := seg.Range().Intersect(memmap.MappableRange{Start: start, End: end})
		ims, err := i.fs.mf.MapInternal(seg.FileRangeOf(r), hostarch.Write)
		if err == nil {
			_, err = safemem.CopySeq(ims, safemem.BlockSeqOf(safemem.BlockFromSafeSlice(p[r.Start-start:r.End-start])))
		}
		if err != nil {
			// The page no longer matches the image: drop it.
			i.cache.Drop(memmap.MappableRange{Start: hostarch.PageRoundDown(r.Start), End: hostarch.MustPageRoundUp(r.End)}, i.fs.mf)
			return
		}
	}
}

// zeroCachedLocked zeroes cached bytes in [from, to), limited to the page
// that holds from: the tail of an old last page that becomes part of the
// file when it grows.
//
// Preconditions: i.dataMu is held.
func (i *inode) zeroCachedLocked(from, to int64) {
	pgEnd := int64(hostarch.MustPageRoundUp(uint64(from)))
	to = min(to, pgEnd)
	if from >= to {
		return
	}
	seg := i.cache.FindSegment(uint64(from))
	if !seg.Ok() {
		return
	}
	r := memmap.MappableRange{Start: uint64(from), End: uint64(to)}.Intersect(seg.Range())
	if ims, err := i.fs.mf.MapInternal(seg.FileRangeOf(r), hostarch.Write); err == nil {
		safemem.ZeroSeq(ims)
	}
}
