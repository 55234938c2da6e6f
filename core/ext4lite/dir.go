package ext4lite

import (
	"fmt"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// dirEnd is where entries end in a leaf block (before the checksum tail).
func (fs *FS) dirEnd() int {
	if fs.csum {
		return fs.geo.blockSize - disk.DirTailSize
	}
	return fs.geo.blockSize
}

// dirBlock returns the buffer of logical block lblk of directory n.
func (fs *FS) dirBlock(n *inode, m *fileMap, lblk uint32) (*buffer, error) {
	mp := m.lookup(uint64(lblk), 1)
	if mp.physical == 0 || mp.uninit {
		return nil, corruptf("directory %d has a hole at block %d", n.ino, lblk)
	}
	return fs.bread(mp.physical)
}

// stripHtree turns an indexed directory into a linear one: the root's
// index (inside the ".." entry) and the interior nodes are overwritten with
// empty space, and the index flag is cleared. Leaf blocks are already valid
// linear blocks.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) stripHtree(n *inode, d *dirIndex) error {
	if n.raw.Flags()&disk.FlagIndex == 0 {
		return nil
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return err
	}
	seed := fs.inodeSeed(n)
	end := fs.dirEnd()
	b, err := fs.dirBlock(n, m, 0)
	if err != nil {
		return err
	}
	data := fs.modify(b)
	dot, err := disk.DirEntryAt(data, 0)
	if err != nil {
		return err
	}
	clear(data[dot.RecLen+disk.DirRecLen(2):])
	disk.SetDirEntryRecLen(data, dot.RecLen, end-dot.RecLen)
	fs.sealDirBlock(data, seed)
	gap, err := blockGap(data, end)
	if err != nil {
		return err
	}
	d.setGap(0, gap)
	for _, l := range d.dxNodes {
		b, err := fs.dirBlock(n, m, l)
		if err != nil {
			return err
		}
		data := fs.modify(b)
		clear(data)
		disk.PutDirEntry(data, 0, 0, end, 0, nil)
		fs.sealDirBlock(data, seed)
		d.setGap(l, end)
	}
	d.dxNodes = nil
	n.raw.SetFlags(n.raw.Flags() &^ disk.FlagIndex)
	fs.markDirty(n)
	return nil
}

// sealDirBlock writes a leaf block's checksum tail.
func (fs *FS) sealDirBlock(data []byte, seed uint32) {
	if fs.csum {
		disk.PutDirTail(data, seed)
	}
}

// dirAddBlocks is the most blocks adding one entry can allocate: a
// directory block plus extent tree growth.
const dirAddBlocks = 2 + disk.MaxExtentDepth

// dirAddReserve is the most blocks adding an entry to directory n can
// allocate: a block, extent tree growth, and turning an indirect-mapped
// directory into an extent-mapped one.
func (fs *FS) dirAddReserve(n *inode) uint64 {
	need := uint64(dirAddBlocks)
	if n.fmap != nil && n.fmap.blockmap {
		need += n.fmap.treeBlocks() + treeSlack(uint64(len(n.fmap.exts)))
	}
	return need
}

// dirAdd adds entry name → ino to directory n.
//
// Preconditions: fs.mu is held exclusively; name is not in the directory;
// dirAddBlocks blocks were reserved.
func (fs *FS) dirAdd(n *inode, d *dirIndex, name string, ino Ino, ft uint8) error {
	if d.inline != nil {
		return fmt.Errorf("directory %d keeps its entries inline: %w", n.ino, unix.EROFS)
	}
	if err := fs.stripHtree(n, d); err != nil {
		return err
	}
	if !fs.filetype {
		ft = 0
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return err
	}
	need := disk.DirRecLen(len(name))
	lblk, ok := d.blockWithRoom(need)
	var data []byte
	if ok {
		b, err := fs.dirBlock(n, m, lblk)
		if err != nil {
			return err
		}
		data = fs.modify(b)
	} else {
		if lblk, data, err = fs.dirGrow(n, m, d); err != nil {
			return err
		}
	}
	off, gap, err := insertEntry(data, fs.dirEnd(), need, name, ino, ft)
	if err != nil {
		return err
	}
	fs.sealDirBlock(data, fs.inodeSeed(n))
	d.setGap(lblk, gap)
	d.names[name] = dirSlot{ino: ino, block: lblk, off: uint32(off), ft: ft}
	d.entries++
	if ft == disk.FtDir {
		d.subdirs++
	}
	return nil
}

// insertEntry writes an entry into the first gap of at least need bytes
// and returns its offset and the block's largest gap afterwards.
func insertEntry(data []byte, end, need int, name string, ino Ino, ft uint8) (int, int, error) {
	at := -1
	var slot disk.DirEntry
	others := 0 // largest gap outside the entry that is split
	err := disk.WalkDirBlock(data, end, ^uint32(0), func(e disk.DirEntry) bool {
		gap := e.RecLen
		if e.Inode != 0 {
			gap -= disk.DirRecLen(len(e.Name))
		}
		if at < 0 && gap >= need {
			at, slot = e.Offset, e
			return true
		}
		others = max(others, gap)
		return true
	})
	if err != nil {
		return 0, 0, err
	}
	if at < 0 {
		return 0, 0, corruptf("directory block free-space index is stale")
	}
	if slot.Inode == 0 {
		disk.PutDirEntry(data, at, ino, slot.RecLen, ft, []byte(name))
		return at, max(others, slot.RecLen-need), nil
	}
	used := disk.DirRecLen(len(slot.Name))
	disk.SetDirEntryRecLen(data, at, used)
	disk.PutDirEntry(data, at+used, ino, slot.RecLen-used, ft, []byte(name))
	return at + used, max(others, slot.RecLen-used-need), nil
}

// dirGrow appends an empty block to directory n.
func (fs *FS) dirGrow(n *inode, m *fileMap, d *dirIndex) (uint32, []byte, error) {
	if err := fs.convertToExtents(n, m); err != nil {
		return 0, nil, err
	}
	lblk := uint32(len(d.blocks))
	if uint64(lblk+1)*uint64(fs.geo.blockSize) > maxDirSize {
		return 0, nil, fmt.Errorf("directory %d reached %d bytes: %w", n.ino, maxDirSize, unix.ENOSPC)
	}
	goal := m.goalFor(uint64(lblk))
	if goal == 0 {
		goal = fs.inodeGoal(n.ino)
	}
	phys, err := fs.allocBlock(goal)
	if err != nil {
		return 0, nil, err
	}
	b := fs.bnew(phys)
	disk.PutDirEntry(b.data, 0, 0, fs.dirEnd(), 0, nil)
	m.insert(disk.Extent{Logical: lblk, Len: 1, Physical: phys})
	if err := fs.writeFileMap(n, m); err != nil {
		return 0, nil, err
	}
	fs.addBlocks(n, 1)
	n.raw.SetSize(uint64(lblk+1) * uint64(fs.geo.blockSize))
	d.blocks = append(d.blocks, dirBlockInfo{bucket: -1})
	d.setGap(lblk, fs.dirEnd())
	return lblk, b.data, nil
}

// dirRemove removes entry name from directory n.
//
// Preconditions: fs.mu is held exclusively; name is in the directory.
func (fs *FS) dirRemove(n *inode, d *dirIndex, name string) error {
	if d.inline != nil {
		return fmt.Errorf("directory %d keeps its entries inline: %w", n.ino, unix.EROFS)
	}
	if err := fs.stripHtree(n, d); err != nil {
		return err
	}
	slot := d.names[name]
	m, err := fs.fileMapOf(n)
	if err != nil {
		return err
	}
	b, err := fs.dirBlock(n, m, slot.block)
	if err != nil {
		return err
	}
	data := fs.modify(b)
	end := fs.dirEnd()
	prev, prevGap := -1, 0
	var cur disk.DirEntry
	found := false
	others := 0 // largest gap outside prev and the removed entry
	err = disk.WalkDirBlock(data, end, ^uint32(0), func(e disk.DirEntry) bool {
		gap := e.RecLen
		if e.Inode != 0 {
			gap -= disk.DirRecLen(len(e.Name))
		}
		if e.Offset == int(slot.off) {
			cur, found = e, true
			return true
		}
		if !found {
			if prev >= 0 {
				others = max(others, prevGap)
			}
			prev, prevGap = e.Offset, gap
			return true
		}
		others = max(others, gap)
		return true
	})
	if err != nil {
		return err
	}
	if !found || cur.Inode != slot.ino {
		return corruptf("directory %d index is stale for %q", n.ino, name)
	}
	gap := others
	if prev >= 0 {
		p, err := disk.DirEntryAt(data, prev)
		if err != nil {
			return err
		}
		disk.SetDirEntryRecLen(data, prev, p.RecLen+cur.RecLen)
		gap = max(gap, prevGap+cur.RecLen)
	} else {
		disk.SetDirEntryInode(data, int(slot.off), 0)
		gap = max(gap, cur.RecLen)
	}
	fs.sealDirBlock(data, fs.inodeSeed(n))
	d.setGap(slot.block, gap)
	delete(d.names, name)
	d.entries--
	if slot.ft == disk.FtDir {
		d.subdirs--
	}
	return nil
}

// dirSet points existing entry name at ino (rename over an existing name,
// and ".." of a moved directory).
//
// Preconditions: fs.mu is held exclusively; name is in the directory.
func (fs *FS) dirSet(n *inode, d *dirIndex, name string, ino Ino, ft uint8) error {
	if d.inline != nil {
		return fmt.Errorf("directory %d keeps its entries inline: %w", n.ino, unix.EROFS)
	}
	if err := fs.stripHtree(n, d); err != nil {
		return err
	}
	if !fs.filetype {
		ft = 0
	}
	slot := d.names[name]
	m, err := fs.fileMapOf(n)
	if err != nil {
		return err
	}
	b, err := fs.dirBlock(n, m, slot.block)
	if err != nil {
		return err
	}
	data := fs.modify(b)
	e, err := disk.DirEntryAt(data, int(slot.off))
	if err != nil || e.Inode != slot.ino || string(e.Name) != name {
		return corruptf("directory %d index is stale for %q", n.ino, name)
	}
	disk.SetDirEntryInode(data, int(slot.off), ino)
	data[int(slot.off)+7] = ft
	fs.sealDirBlock(data, fs.inodeSeed(n))
	if name != "." && name != ".." {
		if slot.ft == disk.FtDir {
			d.subdirs--
		}
		if ft == disk.FtDir {
			d.subdirs++
		}
	}
	slot.ino, slot.ft = ino, ft
	d.names[name] = slot
	return nil
}

// initDirBlock fills a new directory's first block.
func (fs *FS) initDirBlock(data []byte, self, parent Ino, seed uint32) {
	ft := uint8(disk.FtDir)
	if !fs.filetype {
		ft = 0
	}
	disk.PutDirEntry(data, 0, self, disk.DirRecLen(1), ft, []byte("."))
	disk.PutDirEntry(data, disk.DirRecLen(1), parent, fs.dirEnd()-disk.DirRecLen(1), ft, []byte(".."))
	fs.sealDirBlock(data, seed)
}

// syncDirLinks sets a directory's link count from its subdirectories:
// 2 + subdirs, or 1 once that exceeds ext4's limit (dir_nlink).
func (fs *FS) syncDirLinks(n *inode, d *dirIndex) {
	want := 2 + d.subdirs
	if want > disk.LinkMax {
		want = 1
	}
	if int(n.raw.Links()) != want {
		n.raw.SetLinks(uint16(want))
		fs.markDirty(n)
	}
}

// inodeGoal is an allocation goal for blocks of inode ino: the start of its
// group's flex group data area.
func (fs *FS) inodeGoal(ino Ino) uint64 {
	grp, _ := fs.geo.groupOfInode(ino)
	return fs.geo.groupStart(grp)
}
