package ext4lite

import (
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Fallocate modes as in Linux.
const (
	FallocKeepSize  = 0x1
	FallocPunchHole = 0x2
	FallocZeroRange = 0x10
)

// Fallocate allocates (as unwritten extents), punches or zeroes a range of
// regular file ino, like fallocate(2) with mode 0, FallocKeepSize,
// FallocPunchHole|FallocKeepSize or FallocZeroRange.
func (fs *FS) Fallocate(ino Ino, mode uint32, off, length int64) error {
	if off < 0 || length <= 0 {
		return unix.EINVAL
	}
	if mode&^(FallocKeepSize|FallocPunchHole|FallocZeroRange) != 0 {
		return unix.EOPNOTSUPP
	}
	if mode&FallocPunchHole != 0 && (mode&FallocKeepSize == 0 || mode&FallocZeroRange != 0) {
		return unix.EOPNOTSUPP
	}
	return fs.updateInode(ino, func(n *inode) error { return fs.fallocate(n, mode, off, length) })
}

// fallocate is Fallocate on n, its arguments checked.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) fallocate(n *inode, mode uint32, off, length int64) error {
	if err := fs.checkWritableFile(n); err != nil {
		return err
	}
	if off+length > fs.maxFileSize() || off+length < off {
		return unix.EFBIG
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return err
	}
	bs := int64(fs.geo.blockSize)
	first := uint64((off + bs - 1) / bs) // first whole block
	last := uint64((off + length) / bs)  // end of whole blocks
	var holes uint64
	if mode&FallocPunchHole == 0 {
		holes = m.holes(uint64(off/bs), uint64((off+length+bs-1)/bs))
	}
	// Fragmented free space can turn every new block into an extent.
	need := holes + treeSlack(holes) + m.treeBlocks()
	if err := fs.reserveBlocks(need); err != nil {
		return err
	}
	if err := fs.convertToExtents(n, m); err != nil {
		return err
	}
	size := int64(n.raw.Size())
	if mode&(FallocPunchHole|FallocZeroRange) != 0 {
		if err := fs.zeroPartial(m, off, length); err != nil {
			return err
		}
	}
	switch {
	case mode&FallocPunchHole != 0 && first < last:
		var count int64
		for _, r := range m.remove(first, last) {
			if err := fs.freeBlockRange(r.start, r.n); err != nil {
				return err
			}
			count += int64(r.n)
		}
		fs.addBlocks(n, -count)
	case mode&FallocZeroRange != 0 && first < last:
		// Like the kernel: written blocks become unwritten in place, so
		// zeroing needs no free space for them.
		m.setUninit(first, last)
	}
	if mode&FallocPunchHole == 0 {
		// Allocate unwritten extents over the holes. With ZERO_RANGE the
		// partial edge blocks were zeroed in place if written; holes at
		// the edges read as zeros already.
		if off > size {
			if err := fs.zeroTail(n, m, size, off); err != nil {
				return err
			}
		}
		if err := fs.allocUnwritten(n, m, uint64(off/bs), uint64((off+length+bs-1)/bs)); err != nil {
			return err
		}
		if mode&FallocKeepSize == 0 && off+length > size {
			n.raw.SetSize(uint64(off + length))
		}
	}
	if err := fs.writeFileMap(n, m); err != nil {
		return err
	}
	now := fs.nowStamp()
	if mode != 0 && mode != FallocKeepSize {
		n.raw.SetMtime(now)
	}
	n.raw.SetCtime(now)
	fs.markDirty(n)
	return nil
}

// zeroPartial zeroes, in place, the parts of the first and last blocks of
// [off, off+length) that the range covers only partly.
func (fs *FS) zeroPartial(m *fileMap, off, length int64) error {
	bs := int64(fs.geo.blockSize)
	zero := func(from, to int64) error {
		if from >= to {
			return nil
		}
		mp := m.lookup(uint64(from/bs), 1)
		if mp.physical == 0 || mp.uninit {
			return nil
		}
		return fs.writeDataAt(mp.physical, from%bs, make([]byte, to-from))
	}
	end := off + length
	if off/bs == (end-1)/bs {
		if off%bs != 0 || end%bs != 0 {
			return zero(off, end)
		}
		return nil
	}
	if off%bs != 0 {
		if err := zero(off, (off/bs+1)*bs); err != nil {
			return err
		}
	}
	if end%bs != 0 {
		return zero(end/bs*bs, end)
	}
	return nil
}

// allocUnwritten maps every hole in [start, end) to unwritten extents.
func (fs *FS) allocUnwritten(n *inode, m *fileMap, start, end uint64) error {
	var allocated int64
	defer func() {
		if allocated > 0 {
			fs.addBlocks(n, allocated)
		}
	}()
	for pos := start; pos < end; {
		mp := m.lookup(pos, end-pos)
		if mp.physical != 0 {
			pos += mp.n
			continue
		}
		goal := m.goalFor(pos)
		if goal == 0 {
			goal = fs.inodeGoal(n.ino)
		}
		phys, got, err := fs.allocBlocks(goal, min(mp.n, disk.MaxUninitExtentLen))
		if err != nil {
			return err
		}
		allocated += int64(got)
		m.insert(disk.Extent{Logical: uint32(pos), Len: uint32(got), Physical: phys, Uninit: true})
		pos += got
	}
	return nil
}
