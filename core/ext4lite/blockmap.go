package ext4lite

import (
	"encoding/binary"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Indirect block map layout (ext2/ext3 files).
const (
	directBlocks = 12
	indBlock     = 12
	dindBlock    = 13
	tindBlock    = 14
)

// loadBlockMap reads an indirect-mapped file's map as extents.
func (fs *FS) loadBlockMap(n *inode) (*fileMap, error) {
	m := &fileMap{blockmap: true, dirtyFrom: -1}
	ib := n.raw.IBlock()
	add := func(lblk uint64, pblk uint64) error {
		if pblk == 0 {
			return nil
		}
		if why := fs.badBlocks(n.ino, pblk, 1); why != "" {
			return corruptf("the block map entry for logical block %d points at %s", lblk, why)
		}
		if k := len(m.exts); k > 0 {
			last := &m.exts[k-1]
			if last.End() == lblk && last.Physical+uint64(last.Len) == pblk && last.Len < disk.MaxInitExtentLen {
				last.Len++
				return nil
			}
		}
		m.exts = append(m.exts, disk.Extent{Logical: uint32(lblk), Len: 1, Physical: pblk})
		return nil
	}
	for i := range directBlocks {
		if err := add(uint64(i), uint64(binary.LittleEndian.Uint32(ib[4*i:]))); err != nil {
			return nil, err
		}
	}
	per := uint64(fs.geo.blockSize / 4)
	seen := make(map[uint64]bool)
	var walk func(blk uint64, level int, base uint64) error
	walk = func(blk uint64, level int, base uint64) error {
		if blk == 0 {
			return nil
		}
		if why := fs.badBlocks(n.ino, blk, 1); why != "" {
			return corruptf("an indirect block pointer points at %s", why)
		}
		if seen[blk] {
			return corruptf("indirect block %d referenced twice", blk)
		}
		seen[blk] = true
		m.indirect = append(m.indirect, blk)
		b, err := fs.bread(blk)
		if err != nil {
			return err
		}
		span := uint64(1)
		for range level {
			span *= per
		}
		for i := range per {
			child := uint64(binary.LittleEndian.Uint32(b.data[4*i:]))
			if level == 0 {
				if err := add(base+i, child); err != nil {
					return err
				}
				continue
			}
			if err := walk(child, level-1, base+i*span); err != nil {
				return err
			}
		}
		return nil
	}
	base := uint64(directBlocks)
	for level, slot := range []int{indBlock, dindBlock, tindBlock} {
		if err := walk(uint64(binary.LittleEndian.Uint32(ib[4*slot:])), level, base); err != nil {
			return nil, err
		}
		span := uint64(1)
		for range level + 1 {
			span *= per
		}
		base += span
	}
	return m, nil
}

// convertToExtents turns a block-mapped file into an extent-mapped one
// before its first change, the way chattr +e migrates files.
//
// Preconditions: fs.mu is held exclusively; blocks for the tree reserved.
func (fs *FS) convertToExtents(n *inode, m *fileMap) error {
	if !m.blockmap {
		return nil
	}
	ind := uint64(len(m.indirect))
	if err := fs.freeTree(m); err != nil {
		return err
	}
	fs.addBlocks(n, -int64(ind))
	m.blockmap = false
	m.packed = false
	m.dirtyFrom = 0
	n.raw.SetFlags(n.raw.Flags() | disk.FlagExtents)
	emptyExtentRoot(n.raw)
	fs.markDirty(n)
	return fs.writeFileMap(n, m)
}
