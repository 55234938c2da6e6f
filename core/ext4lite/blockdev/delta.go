package blockdev

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/cleanup"
)

// Delta is a copy-on-write Device: reads of blocks the episode never wrote
// come from the golden image, which is opened read-only and never written;
// written blocks live in a sparse delta file. A dirty-block bitmap in the
// delta file says which is which.
//
// Crash safety: a block's data is written before its bitmap bit, both with
// pwrite, so a killed process never leaves a set bit over missing data. Sync
// makes both durable.
type Delta struct {
	golden   *os.File
	delta    *os.File
	hdr      deltaHeader
	readOnly bool

	// mu protects dirty and the delta file's data and bitmap regions.
	// Reads hold it shared so that a block's source cannot change under
	// them.
	mu    sync.RWMutex
	dirty []byte
}

var _ Device = (*Delta)(nil)
var _ Discarder = (*Delta)(nil)

// CreateDelta creates a new, empty delta at path over the golden image at
// goldenPath. It costs O(1) in the golden size: the delta file is sparse.
func CreateDelta(goldenPath, path string) error {
	abs, err := filepath.Abs(goldenPath)
	if err != nil {
		return fmt.Errorf("blockdev: %w", err)
	}
	golden, err := openImage(abs, true)
	if err != nil {
		return fmt.Errorf("blockdev: open golden: %w", err)
	}
	defer golden.Close()
	if err := lockImage(golden, true); err != nil {
		return err
	}
	id, err := identify(golden)
	if err != nil {
		return err
	}
	return createDeltaFile(path, id, abs)
}

func createDeltaFile(path string, id goldenIdentity, goldenPath string) error {
	hdr, err := newDeltaHeader(id, goldenPath)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("blockdev: create delta: %w", err)
	}
	cu := cleanup.Make(func() {
		f.Close()
		os.Remove(path)
	})
	defer cu.Clean()
	if err := initDeltaFile(f, hdr); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("blockdev: create delta: %w", err)
	}
	cu.Release()
	return nil
}

// initDeltaFile writes the header of an empty delta into f and sizes it.
// It does not sync: the first Sync of the opened delta (ext4lite commits
// when it opens a volume) makes the header durable with everything else.
func initDeltaFile(f *os.File, hdr deltaHeader) error {
	nblocks := (hdr.golden.size + deltaBlockSize - 1) / deltaBlockSize
	if err := f.Truncate(hdr.dataOff + nblocks*deltaBlockSize); err != nil {
		return fmt.Errorf("blockdev: size delta: %w", err)
	}
	if _, err := f.WriteAt(hdr.marshal(), 0); err != nil {
		return fmt.Errorf("blockdev: write delta header: %w", err)
	}
	return nil
}

// OpenDelta opens the delta at path. goldenPath overrides the golden path
// recorded in the delta (pass "" to use the recorded one). The golden must
// be the very image the delta was made from, unchanged since; otherwise
// OpenDelta fails with an error wrapping ErrWrongGolden.
func OpenDelta(path, goldenPath string, readOnly bool) (*Delta, error) {
	f, err := openImage(path, readOnly)
	if err != nil {
		return nil, fmt.Errorf("blockdev: open delta: %w", err)
	}
	cu := cleanup.Make(func() { f.Close() })
	defer cu.Clean()
	if err := lockImage(f, readOnly); err != nil {
		return nil, err
	}
	hb := make([]byte, deltaHeaderSize)
	if _, err := f.ReadAt(hb, 0); err != nil {
		return nil, fmt.Errorf("blockdev: read delta header of %s: %w", path, err)
	}
	hdr, err := parseDeltaHeader(hb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if goldenPath == "" {
		goldenPath = hdr.goldenPath
	}
	golden, err := openImage(goldenPath, true)
	if err != nil {
		return nil, fmt.Errorf("blockdev: open golden of delta %s: %w", path, err)
	}
	cu.Add(func() { golden.Close() })
	// Shared by every clone of the golden; no one may write it meanwhile.
	if err := lockImage(golden, true); err != nil {
		return nil, err
	}
	id, err := identify(golden)
	if err != nil {
		return nil, err
	}
	switch {
	case id.size != hdr.golden.size:
		return nil, fmt.Errorf("%w: golden %s is %d bytes, delta %s was made from %d bytes", ErrWrongGolden, goldenPath, id.size, path, hdr.golden.size)
	case id.uuid != hdr.golden.uuid:
		return nil, fmt.Errorf("%w: golden %s has UUID %x, delta %s was made from UUID %x", ErrWrongGolden, goldenPath, id.uuid, path, hdr.golden.uuid)
	case id.fingerprint != hdr.golden.fingerprint:
		return nil, fmt.Errorf("%w: golden %s changed since delta %s was made from it (never write a golden that has clones)", ErrWrongGolden, goldenPath, path)
	}
	nblocks := (hdr.golden.size + deltaBlockSize - 1) / deltaBlockSize
	dirty := make([]byte, (nblocks+7)/8)
	if _, err := f.ReadAt(dirty, hdr.bitmapOff); err != nil {
		return nil, fmt.Errorf("blockdev: read delta bitmap of %s: %w", path, err)
	}
	cu.Release()
	return &Delta{golden: golden, delta: f, hdr: hdr, readOnly: readOnly, dirty: dirty}, nil
}

// GoldenPath returns the path of the golden image recorded in the delta.
func (d *Delta) GoldenPath() string { return d.hdr.goldenPath }

// DirtyBlocks returns how many blocks the delta holds.
func (d *Delta) DirtyBlocks() int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var n int64
	for _, b := range d.dirty {
		for ; b != 0; b &= b - 1 {
			n++
		}
	}
	return n
}

func (d *Delta) isDirty(blk int64) bool { return d.dirty[blk/8]&(1<<(blk%8)) != 0 }

// Size implements Device.Size.
func (d *Delta) Size() int64 { return d.hdr.golden.size }

// ReadAt implements io.ReaderAt.
func (d *Delta) ReadAt(p []byte, off int64) (int, error) {
	if err := checkRange(off, len(p), d.Size()); err != nil {
		return 0, err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	done := 0
	for done < len(p) {
		// Read the longest run of blocks that come from the same file.
		pos := off + int64(done)
		blk := pos / deltaBlockSize
		dirty := d.isDirty(blk)
		end := (blk + 1) * deltaBlockSize
		for end < off+int64(len(p)) && d.isDirty(end/deltaBlockSize) == dirty {
			end += deltaBlockSize
		}
		n := int(min(end, off+int64(len(p))) - pos)
		var err error
		if dirty {
			_, err = d.delta.ReadAt(p[done:done+n], d.hdr.dataOff+pos)
		} else {
			_, err = d.golden.ReadAt(p[done:done+n], pos)
		}
		if err != nil {
			return done, fmt.Errorf("blockdev: delta read at %d: %w", pos, err)
		}
		done += n
	}
	return done, nil
}

// WriteAt implements io.WriterAt. Partial writes to a block the delta does
// not hold yet copy the rest of the block from the golden first.
func (d *Delta) WriteAt(p []byte, off int64) (int, error) {
	if d.readOnly {
		return 0, ErrReadOnly
	}
	if err := checkRange(off, len(p), d.Size()); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	first := off / deltaBlockSize
	last := (off + int64(len(p)) - 1) / deltaBlockSize
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		blk := pos / deltaBlockSize
		inBlock := pos % deltaBlockSize
		if inBlock != 0 || len(p)-done < deltaBlockSize {
			// A partial block.
			n := int(min(deltaBlockSize-inBlock, int64(len(p)-done)))
			if err := d.writePartial(blk, inBlock, p[done:done+n]); err != nil {
				return done, err
			}
			done += n
			continue
		}
		// Whole blocks, up to the last whole one.
		n := (len(p) - done) / deltaBlockSize * deltaBlockSize
		if _, err := d.delta.WriteAt(p[done:done+n], d.hdr.dataOff+pos); err != nil {
			return done, fmt.Errorf("blockdev: delta write at %d: %w", pos, err)
		}
		done += n
	}
	if err := d.markDirty(first, last); err != nil {
		return 0, err
	}
	return len(p), nil
}

// writePartial writes part of one block.
//
// Preconditions: d.mu is locked.
func (d *Delta) writePartial(blk, inBlock int64, p []byte) error {
	if d.isDirty(blk) {
		if _, err := d.delta.WriteAt(p, d.hdr.dataOff+blk*deltaBlockSize+inBlock); err != nil {
			return fmt.Errorf("blockdev: delta write in block %d: %w", blk, err)
		}
		return nil
	}
	buf := make([]byte, deltaBlockSize)
	start := blk * deltaBlockSize
	n := min(deltaBlockSize, d.Size()-start)
	if _, err := d.golden.ReadAt(buf[:n], start); err != nil {
		return fmt.Errorf("blockdev: read golden block %d: %w", blk, err)
	}
	copy(buf[inBlock:], p)
	if _, err := d.delta.WriteAt(buf, d.hdr.dataOff+start); err != nil {
		return fmt.Errorf("blockdev: delta write of block %d: %w", blk, err)
	}
	return nil
}

// markDirty sets the bits of blocks first..last and writes the bitmap bytes
// that changed.
//
// Preconditions: d.mu is locked; the blocks' data is written.
func (d *Delta) markDirty(first, last int64) error {
	lo, hi := int64(-1), int64(-1)
	for blk := first; blk <= last; blk++ {
		if d.isDirty(blk) {
			continue
		}
		d.dirty[blk/8] |= 1 << (blk % 8)
		if lo < 0 {
			lo = blk / 8
		}
		hi = blk / 8
	}
	if lo < 0 {
		return nil
	}
	if _, err := d.delta.WriteAt(d.dirty[lo:hi+1], d.hdr.bitmapOff+lo); err != nil {
		return fmt.Errorf("blockdev: write delta bitmap: %w", err)
	}
	return nil
}

// Discard implements Discarder: whole blocks in the range are dropped from
// the delta (they read as the golden again) and their space is punched out.
func (d *Delta) Discard(off, length int64) error {
	if d.readOnly {
		return ErrReadOnly
	}
	if off < 0 || length < 0 || off > d.Size()-length {
		return errors.New("blockdev: discard beyond the device")
	}
	first := (off + deltaBlockSize - 1) / deltaBlockSize
	end := (off + length) / deltaBlockSize
	if first >= end {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	lo, hi := int64(-1), int64(-1)
	for blk := first; blk < end; blk++ {
		if !d.isDirty(blk) {
			continue
		}
		d.dirty[blk/8] &^= 1 << (blk % 8)
		if lo < 0 {
			lo = blk / 8
		}
		hi = blk / 8
	}
	if lo < 0 {
		return nil
	}
	// Clear the bits before dropping the data, so a crash in between
	// leaves no bit over a hole.
	if _, err := d.delta.WriteAt(d.dirty[lo:hi+1], d.hdr.bitmapOff+lo); err != nil {
		return fmt.Errorf("blockdev: write delta bitmap: %w", err)
	}
	err := unix.Fallocate(int(d.delta.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE,
		d.hdr.dataOff+first*deltaBlockSize, (end-first)*deltaBlockSize)
	if err != nil && err != unix.EOPNOTSUPP && err != unix.ENOSYS {
		return fmt.Errorf("blockdev: punch delta: %w", err)
	}
	return nil
}

// Sync implements Device.Sync. The golden is never written, so only the
// delta file needs syncing.
func (d *Delta) Sync() error {
	if d.readOnly {
		return nil
	}
	if err := unix.Fdatasync(int(d.delta.Fd())); err != nil {
		return fmt.Errorf("blockdev: sync delta: %w", err)
	}
	return nil
}

// Close implements Device.Close.
func (d *Delta) Close() error {
	err := d.delta.Close()
	if gerr := d.golden.Close(); err == nil {
		err = gerr
	}
	return err
}
