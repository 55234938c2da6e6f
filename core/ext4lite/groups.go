package ext4lite

import (
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// group is the in-memory state of one block group. desc is authoritative
// while the filesystem is open; flushGroups writes it into the group
// descriptor table with fresh checksums.
type group struct {
	desc             disk.GroupDesc
	dirty            bool
	blockBitmapDirty bool
	inodeBitmapDirty bool
	// bitmapsChecked says the bitmaps' checksums were verified since the
	// filesystem opened.
	blockBitmapChecked bool
	inodeBitmapChecked bool
}

// loadGroups reads and checks the group descriptor table.
func (fs *FS) loadGroups() error {
	fs.groups = make([]group, fs.geo.groups)
	fs.freeBlocks, fs.freeInodes = 0, 0
	for grp := range fs.geo.groups {
		blk, off := fs.geo.gdtBlock(grp)
		b, err := fs.bread(blk)
		if err != nil {
			return err
		}
		d := disk.GroupDesc(append([]byte(nil), b.data[off:off+fs.geo.descSize]...))
		if fs.sb.HasGroupCsum() && !fs.opts.skipChecksums {
			if got, want := d.Checksum(), d.ComputeChecksum(fs.sb, grp); got != want {
				return corruptf("group %d descriptor checksum %#04x, computed %#04x", grp, got, want)
			}
		}
		if err := fs.checkGroupDesc(grp, d); err != nil {
			return err
		}
		fs.groups[grp].desc = d
		fs.freeBlocks += uint64(d.FreeBlocks())
		fs.freeInodes += uint64(d.FreeInodes())
	}
	fs.buildMetaZone()
	return nil
}

// checkGroupDesc validates the locations and counts of a descriptor.
func (fs *FS) checkGroupDesc(grp uint32, d disk.GroupDesc) error {
	g := &fs.geo
	in := func(b uint64, n uint32) bool {
		return b > g.sbBlock && b+uint64(n) <= g.blocksCount && b+uint64(n) > b
	}
	if !in(d.BlockBitmap(), 1) || !in(d.InodeBitmap(), 1) || !in(d.InodeTable(), g.itableBlocks) {
		return corruptf("group %d metadata outside the filesystem (bitmaps %d/%d, table %d)", grp, d.BlockBitmap(), d.InodeBitmap(), d.InodeTable())
	}
	if d.FreeBlocks() > g.blocksInGroup(grp) || d.FreeInodes() > g.ipg || d.ItableUnused() > g.ipg {
		return corruptf("group %d counts out of range (%d free blocks, %d free inodes, %d unused)", grp, d.FreeBlocks(), d.FreeInodes(), d.ItableUnused())
	}
	return nil
}

// markGroupDirty schedules group grp's descriptor for flushing.
func (fs *FS) markGroupDirty(grp uint32) {
	g := &fs.groups[grp]
	if !g.dirty {
		g.dirty = true
		fs.dirtyGrp = append(fs.dirtyGrp, grp)
	}
	fs.sbDirty = true
	fs.op.mutated = true
}

// flushGroups writes dirty descriptors, with bitmap and descriptor
// checksums, into the group descriptor table.
func (fs *FS) flushGroups() error {
	for _, grp := range fs.dirtyGrp {
		g := &fs.groups[grp]
		if fs.csum {
			if g.blockBitmapDirty {
				b, err := fs.bread(g.desc.BlockBitmap())
				if err != nil {
					return err
				}
				g.desc.SetBlockBitmapCsum(disk.BitmapCsum(fs.sb, b.data[:fs.geo.bpg/8]))
			}
			if g.inodeBitmapDirty {
				b, err := fs.bread(g.desc.InodeBitmap())
				if err != nil {
					return err
				}
				g.desc.SetInodeBitmapCsum(disk.BitmapCsum(fs.sb, b.data[:fs.geo.ipg/8]))
			}
		}
		g.desc.UpdateChecksum(fs.sb, grp)
		blk, off := fs.geo.gdtBlock(grp)
		b, err := fs.bread(blk)
		if err != nil {
			return err
		}
		copy(fs.modify(b)[off:], g.desc)
		g.dirty, g.blockBitmapDirty, g.inodeBitmapDirty = false, false, false
	}
	fs.dirtyGrp = fs.dirtyGrp[:0]
	return nil
}

// flushSuper writes the in-memory superblock, with exact free counts and
// its checksum, into its block.
func (fs *FS) flushSuper() error {
	if !fs.sbDirty {
		return nil
	}
	fs.sb.SetFreeBlocksCount(fs.freeBlocks)
	fs.sb.SetFreeInodesCount(uint32(fs.freeInodes))
	fs.sb.UpdateChecksum()
	b, err := fs.bread(fs.geo.sbBlock)
	if err != nil {
		return err
	}
	copy(fs.modify(b)[fs.geo.sbOffset:], fs.sb[:])
	fs.sbDirty = false
	return nil
}

// flushObjects writes every dirty in-memory structure into its buffer.
func (fs *FS) flushObjects() error {
	if err := fs.flushInodes(); err != nil {
		return err
	}
	if err := fs.flushGroups(); err != nil {
		return err
	}
	return fs.flushSuper()
}

// blockBitmap returns group grp's block bitmap buffer, building it first if
// the group is still BLOCK_UNINIT (then the group is initialized in the
// running transaction, so only call it when about to change it, or use
// isBlockFree for reads).
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) blockBitmap(grp uint32) (*buffer, error) {
	g := &fs.groups[grp]
	if g.desc.Flags()&disk.BGBlockUninit == 0 || !fs.sb.HasGroupCsum() {
		b, err := fs.bread(g.desc.BlockBitmap())
		if err != nil || g.blockBitmapChecked || !fs.verify {
			return b, err
		}
		if got, want := g.desc.BlockBitmapCsum(), disk.BitmapCsum(fs.sb, b.data[:fs.geo.bpg/8]); got != want {
			return nil, corruptf("group %d block bitmap checksum %#x, computed %#x", grp, got, want)
		}
		g.blockBitmapChecked = true
		return b, nil
	}
	b := fs.bnew(g.desc.BlockBitmap())
	fs.initBlockBitmap(grp, b.data)
	g.desc.SetFlags(g.desc.Flags() &^ disk.BGBlockUninit)
	g.blockBitmapDirty = true
	g.blockBitmapChecked = true
	fs.markGroupDirty(grp)
	return b, nil
}

// initBlockBitmap fills bm with the bitmap of a BLOCK_UNINIT group: only
// the group's own superblock copy and descriptor tables, the metadata of
// any group in its flex group that lives inside it, and the padding past
// the group's end are in use.
func (fs *FS) initBlockBitmap(grp uint32, bm []byte) {
	clear(bm)
	g := &fs.geo
	start := g.groupStart(grp)
	n := g.blocksInGroup(grp)
	for i := range g.superOverhead(grp) {
		setBit(bm, i)
	}
	flexFirst := grp / g.groupsPerFlex * g.groupsPerFlex
	for o := flexFirst; o < flexFirst+g.groupsPerFlex && o < g.groups; o++ {
		d := fs.groups[o].desc
		mark := func(b uint64, cnt uint32) {
			for k := range uint64(cnt) {
				if b+k >= start && b+k < start+uint64(n) {
					setBit(bm, uint32(b+k-start))
				}
			}
		}
		mark(d.BlockBitmap(), 1)
		mark(d.InodeBitmap(), 1)
		mark(d.InodeTable(), g.itableBlocks)
	}
	for i := n; i < uint32(g.blockSize)*8; i++ {
		setBit(bm, i)
	}
}

// inodeBitmap returns group grp's inode bitmap buffer, building it first if
// the group is INODE_UNINIT.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) inodeBitmap(grp uint32) (*buffer, error) {
	g := &fs.groups[grp]
	if g.desc.Flags()&disk.BGInodeUninit == 0 || !fs.sb.HasGroupCsum() {
		b, err := fs.bread(g.desc.InodeBitmap())
		if err != nil || g.inodeBitmapChecked || !fs.verify {
			return b, err
		}
		if got, want := g.desc.InodeBitmapCsum(), disk.BitmapCsum(fs.sb, b.data[:fs.geo.ipg/8]); got != want {
			return nil, corruptf("group %d inode bitmap checksum %#x, computed %#x", grp, got, want)
		}
		g.inodeBitmapChecked = true
		return b, nil
	}
	b := fs.bnew(g.desc.InodeBitmap())
	for i := fs.geo.ipg; i < uint32(fs.geo.blockSize)*8; i++ {
		setBit(b.data, i)
	}
	g.desc.SetFlags(g.desc.Flags() &^ disk.BGInodeUninit)
	g.desc.SetItableUnused(fs.geo.ipg)
	g.inodeBitmapDirty = true
	g.inodeBitmapChecked = true
	fs.markGroupDirty(grp)
	return b, nil
}

// blockInUse reports whether block blk is marked in use, without
// initializing anything.
func (fs *FS) blockInUse(blk uint64) (bool, error) {
	grp := fs.geo.groupOfBlock(blk)
	g := &fs.groups[grp]
	off := uint32(blk - fs.geo.groupStart(grp))
	if g.desc.Flags()&disk.BGBlockUninit != 0 && fs.sb.HasGroupCsum() {
		bm := make([]byte, fs.geo.blockSize)
		fs.initBlockBitmap(grp, bm)
		return testBit(bm, off), nil
	}
	b, err := fs.bread(g.desc.BlockBitmap())
	if err != nil {
		return false, err
	}
	return testBit(b.data, off), nil
}

func setBit(bm []byte, i uint32)       { bm[i/8] |= 1 << (i % 8) }
func clearBit(bm []byte, i uint32)     { bm[i/8] &^= 1 << (i % 8) }
func testBit(bm []byte, i uint32) bool { return bm[i/8]&(1<<(i%8)) != 0 }
