// Package erofs writes uncompressed EROFS images that gVisor's EROFS
// implementation can mount, mmap and exec from.
//
// The writer is built for streaming OCI layers: file contents are appended
// to the image as the layers are read (AddFile), and the metadata is written
// once the tree is complete (Finish). Every byte of content is written once;
// content that a later layer deleted or replaced is squeezed out in Finish.
//
// What gVisor's reader accepts shapes the format: 4 KiB blocks, extended
// inodes only, regular files in the flat-plain layout (inline tails break
// mmap and exec), no compression, no chunks and no on-disk xattrs (an inode
// with xattrs is ENOTSUP). Directories and symlinks keep their tail inline in
// the metadata block, which gVisor and Linux both read.
//
// Images are deterministic: the same tree and the same sequence of AddFile
// calls give the same bytes. Runs of zero blocks are left as holes in the
// host file.
package erofs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/fstree"
	"z.gfire.dev/gvx/core/internal/sparsetar"
)

// copyBufferSize is the unit in which content is read from layers and
// written to the image.
const copyBufferSize = 1 << 20

// writebackChunk is how much written content accumulates before the writer
// asks the kernel to start writing it back. Overlapping disk writes with
// the conversion makes the caller's final fsync cheap.
const writebackChunk = 16 << 20

// maxBlocks bounds the image: block addresses are 32 bits.
const maxBlocks = math.MaxUint32

var zeroBlock [BlockSize]byte

// extent is a run of data blocks written by AddFile.
type extent struct {
	start   uint32 // first block
	nblocks uint32
}

// Options are the image-wide values that do not come from the tree.
type Options struct {
	// BuildTime is recorded in the superblock.
	BuildTime fstree.Timespec
	// UUID identifies the filesystem.
	UUID [16]byte
	// VolumeName is the label, at most 16 bytes.
	VolumeName string
}

// Stats describes a finished image.
type Stats struct {
	Inodes      uint64
	Blocks      uint32
	DataBlocks  uint32
	DeadBlocks  uint32 // content written but no longer referenced, squeezed out
	MovedBlocks uint32 // live blocks moved to close the gaps
}

// Writer builds an EROFS image in a file.
type Writer struct {
	f       *os.File
	next    uint32 // next free data block; block 0 holds the superblock
	extents []extent
	buf     []byte
	done    bool
	// writeback is the offset up to which writeback has been started.
	writeback int64
	// writtenFrom and written are the chunk whose writeback started last;
	// the next chunk waits for it.
	writtenFrom, written int64
	// onWriteback, if set, is called after each chunk's writeback starts.
	onWriteback func()
}

// NewWriter returns a writer that builds an image in f, which must be empty
// and opened read-write. The writer does not close f.
func NewWriter(f *os.File) *Writer {
	return &Writer{f: f, next: 1, buf: make([]byte, copyBufferSize)}
}

// OnWriteback sets fn to be called, on the caller's goroutine, each time the
// writer has started writing back a chunk of content (writebackChunk bytes).
// The image cache uses it to make the image durable while it is still being
// written, so that its final fsync has little left to flush.
func (w *Writer) OnWriteback(fn func()) { w.onWriteback = fn }

// AddFile appends size bytes read from r as the content of a regular file and
// returns the handle to store in fstree.Node.Data. It fails if r ends early.
func (w *Writer) AddFile(r io.Reader, size int64) (uint64, error) {
	return w.AddSparseFile(r, size, []sparsetar.Segment{{Off: 0, Len: size}})
}

// AddSparseFile is AddFile for a file of size bytes whose data is data, in
// order, and the rest holes: r reads the segments' bytes one after the
// other. A hole costs nothing; it stays a hole in the image file.
func (w *Writer) AddSparseFile(r io.Reader, size int64, data []sparsetar.Segment) (uint64, error) {
	if w.done {
		return 0, errors.New("erofs: AddFile after Finish")
	}
	if size < 0 {
		return 0, fmt.Errorf("erofs: negative file size %d", size)
	}
	var end, total int64
	for _, s := range data {
		if s.Off < end || s.Len < 0 || s.Off > size-s.Len {
			return 0, fmt.Errorf("erofs: data segment at %d of %d bytes is out of order or outside the file's %d bytes", s.Off, s.Len, size)
		}
		end, total = s.Off+s.Len, total+s.Len
	}
	nblocks := (uint64(size) + BlockSize - 1) / BlockSize
	if uint64(w.next)+nblocks > maxBlocks {
		return 0, fmt.Errorf("erofs: image would exceed %d blocks (16 TiB)", uint64(maxBlocks))
	}
	start := w.next
	base := int64(start) * BlockSize
	for _, s := range data {
		// Space past what was written so far reads as zeros: the holes
		// between segments need no writing.
		for done := int64(0); done < s.Len; {
			chunk := w.buf[:min(int64(len(w.buf)), s.Len-done)]
			if got, err := io.ReadFull(r, chunk); err != nil {
				if err == io.EOF || err == io.ErrUnexpectedEOF {
					return 0, fmt.Errorf("content ended %d bytes early: %w", total-int64(got), io.ErrUnexpectedEOF)
				}
				return 0, err
			}
			if err := w.writeSparse(chunk, base+s.Off+done); err != nil {
				return 0, err
			}
			done += int64(len(chunk))
			total -= int64(len(chunk))
		}
	}
	w.next = start + uint32(nblocks)
	w.extents = append(w.extents, extent{start: start, nblocks: uint32(nblocks)})
	w.startWriteback()
	return uint64(len(w.extents) - 1), nil
}

// startWriteback asks the kernel to begin writing back what was written
// since the last call, and waits for the chunk before that to reach the
// disk (write-behind): at most two chunks are ever dirty, so the caller's
// final fsync has little left to wait for, and the conversion cannot fill
// the page cache with dirty pages that throttle everyone. Failure is
// harmless: the caller's fsync does the work then.
func (w *Writer) startWriteback() {
	end := int64(w.next) * BlockSize
	if end-w.writeback < writebackChunk {
		return
	}
	fd := int(w.f.Fd())
	unix.SyncFileRange(fd, w.writeback, end-w.writeback, unix.SYNC_FILE_RANGE_WRITE)
	if w.written > 0 {
		unix.SyncFileRange(fd, w.writtenFrom, w.written, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	}
	w.writtenFrom, w.written = w.writeback, end-w.writeback
	w.writeback = end
	if w.onWriteback != nil {
		w.onWriteback()
	}
}

// writeSparse writes b at off, skipping whole zero blocks so they stay holes.
// The skipped region must read as zeros already (fresh space past the data
// written so far).
func (w *Writer) writeSparse(b []byte, off int64) error {
	for len(b) > 0 {
		// Skip leading zero blocks.
		for len(b) >= BlockSize && bytes.Equal(b[:BlockSize], zeroBlock[:]) {
			b, off = b[BlockSize:], off+BlockSize
		}
		// Extend over non-zero blocks.
		n := 0
		for n < len(b) {
			end := min(n+BlockSize, len(b))
			if end-n == BlockSize && bytes.Equal(b[n:end], zeroBlock[:]) {
				break
			}
			n = end
		}
		if n == 0 {
			// Only a partial zero tail is left: nothing to write.
			if allZero(b) {
				return nil
			}
			n = len(b)
		}
		if _, err := w.f.WriteAt(b[:n], off); err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), BlockSize)
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// Finish writes the metadata for the tree rooted at root, whose regular
// files' Data fields are handles returned by AddFile, and completes the
// image. The writer is unusable afterwards.
func (w *Writer) Finish(root *fstree.Node, opts Options) (Stats, error) {
	if w.done {
		return Stats{}, errors.New("erofs: Finish called twice")
	}
	w.done = true
	if !root.IsDir() {
		return Stats{}, errors.New("erofs: the root is not a directory")
	}
	if len(opts.VolumeName) > 16 {
		return Stats{}, fmt.Errorf("erofs: volume name %q is longer than 16 bytes", opts.VolumeName)
	}
	inodes, err := collect(root, len(w.extents))
	if err != nil {
		return Stats{}, err
	}
	stats, relocated, err := w.compact(inodes)
	if err != nil {
		return Stats{}, fmt.Errorf("erofs: squeezing out replaced content: %w", err)
	}
	l, err := planLayout(inodes, relocated, w.next)
	if err != nil {
		return Stats{}, err
	}
	if err := l.write(w.f, &superBlock{
		inodes:    uint64(len(inodes)),
		buildTime: clampTime(opts.BuildTime.Sec),
		buildNsec: opts.BuildTime.Nsec,
		uuid:      opts.UUID,
		volume:    volumeBytes(opts.VolumeName),
	}); err != nil {
		return Stats{}, err
	}
	stats.Inodes = uint64(len(inodes))
	stats.Blocks = l.blocks
	return stats, nil
}

func volumeBytes(name string) (v [16]byte) {
	copy(v[:], name)
	return v
}

// compact moves the extents that are still referenced down over the ones
// that are not, keeping their order, and returns the new start block of
// every live extent (indexed by handle).
func (w *Writer) compact(inodes []*inodeInfo) (Stats, []uint32, error) {
	// Trailing zero blocks were skipped, not written: give the data
	// region its full length so moves read them back as zeros.
	if err := w.f.Truncate(int64(w.next) * BlockSize); err != nil {
		return Stats{}, nil, err
	}
	live := make([]bool, len(w.extents))
	for _, in := range inodes {
		if in.node.Type() == fstree.TypeRegular {
			live[in.node.Data] = true
		}
	}
	var stats Stats
	starts := make([]uint32, len(w.extents))
	next := uint32(1)
	for h, e := range w.extents {
		if !live[h] {
			stats.DeadBlocks += e.nblocks
			continue
		}
		starts[h] = next
		if e.start != next {
			if err := w.move(e, next); err != nil {
				return Stats{}, nil, err
			}
			stats.MovedBlocks += e.nblocks
		}
		next += e.nblocks
	}
	stats.DataBlocks = next - 1
	if next != w.next {
		if err := w.f.Truncate(int64(next) * BlockSize); err != nil {
			return Stats{}, nil, err
		}
		w.next = next
	}
	return stats, starts, nil
}

// move copies extent e down to block dst < e.start, front to back, so the
// overlapping source is always read before it is overwritten. Zero blocks
// become holes at the destination; the source's holes are not read at
// all, so a sparse file claiming a terabyte moves at the cost of its data.
func (w *Writer) move(e extent, dst uint32) error {
	src := int64(e.start) * BlockSize
	shift := src - int64(dst)*BlockSize
	end := src + int64(e.nblocks)*BlockSize
	for off := src; off < end; {
		data, hole, err := w.nextData(off, end)
		if err != nil {
			return err
		}
		if data > off {
			if err := w.punch(off-shift, data-off); err != nil {
				return err
			}
		}
		if err := w.moveData(data, hole, shift); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// nextData returns the first run of data at or after off, [data, hole),
// cut at end; data == end if there is none. Where the file system cannot
// tell, everything is data.
func (w *Writer) nextData(off, end int64) (data, hole int64, err error) {
	fd := int(w.f.Fd())
	data, err = unix.Seek(fd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO):
		return end, end, nil
	case errors.Is(err, unix.EINVAL):
		return off, end, nil
	case err != nil:
		return 0, 0, fmt.Errorf("seeking data: %w", err)
	}
	if data >= end {
		return end, end, nil
	}
	if hole, err = unix.Seek(fd, data, unix.SEEK_HOLE); err != nil {
		return 0, 0, fmt.Errorf("seeking a hole: %w", err)
	}
	// Runs start and end on blocks: the file's are at least as coarse.
	return data &^ (BlockSize - 1), min((hole+BlockSize-1)&^(BlockSize-1), end), nil
}

// moveData copies [from, to) down by shift bytes, block-aligned.
func (w *Writer) moveData(from, to, shift int64) error {
	for from < to {
		n := min(int64(len(w.buf)), to-from)
		chunk := w.buf[:n]
		if _, err := w.f.ReadAt(chunk, from); err != nil {
			return err
		}
		for b := int64(0); b < n; {
			zero := bytes.Equal(chunk[b:b+BlockSize], zeroBlock[:])
			run := b + BlockSize
			for run < n && bytes.Equal(chunk[run:run+BlockSize], zeroBlock[:]) == zero {
				run += BlockSize
			}
			if zero {
				if err := w.punch(from-shift+b, run-b); err != nil {
					return err
				}
			} else if _, err := w.f.WriteAt(chunk[b:run], from-shift+b); err != nil {
				return err
			}
			b = run
		}
		from += n
	}
	return nil
}

func (w *Writer) punch(off, n int64) error {
	if err := unix.Fallocate(int(w.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return fmt.Errorf("punching a hole: %w", err)
	}
	return nil
}

func clampTime(sec int64) uint64 {
	if sec < 0 {
		return 0
	}
	return uint64(sec)
}
