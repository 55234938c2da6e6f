package ext4lite

import (
	"math/bits"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// allocInode allocates an inode number. Directories are spread over the
// groups; other inodes go near their parent.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) allocInode(parent Ino, dir bool) (Ino, error) {
	if fs.freeInodes == 0 {
		return 0, unix.ENOSPC
	}
	g := &fs.geo
	pgrp, _ := g.groupOfInode(parent)
	first := pgrp
	if dir {
		first = fs.pickDirGroup(pgrp)
	}
	for i := range g.groups {
		grp := (first + i) % g.groups
		d := fs.groups[grp].desc
		if d.FreeInodes() == 0 {
			continue
		}
		b, err := fs.inodeBitmap(grp)
		if err != nil {
			return 0, err
		}
		from := uint32(0)
		if grp == 0 {
			from = g.firstIno - 1
		}
		idx := firstZero(b.data, from, g.ipg)
		if idx >= g.ipg {
			return 0, corruptf("group %d claims %d free inodes but its bitmap has none", grp, d.FreeInodes())
		}
		setBit(fs.modify(b), idx)
		d.SetFreeInodes(d.FreeInodes() - 1)
		if dir {
			d.SetUsedDirs(d.UsedDirs() + 1)
		}
		if fs.sb.HasGroupCsum() {
			if unused := d.ItableUnused(); idx >= g.ipg-unused {
				d.SetItableUnused(g.ipg - idx - 1)
			}
			// Like the kernel, initialize the group's block bitmap once
			// the group holds an inode.
			if d.Flags()&disk.BGBlockUninit != 0 {
				if _, err := fs.blockBitmap(grp); err != nil {
					return 0, err
				}
			}
		}
		fs.groups[grp].inodeBitmapDirty = true
		fs.markGroupDirty(grp)
		fs.freeInodes--
		return grp*g.ipg + idx + 1, nil
	}
	return 0, corruptf("no free inode although %d are counted free", fs.freeInodes)
}

// pickDirGroup picks the group for a new directory: the next group after
// the parent's (in flex-group steps) with free inodes and at least average
// free blocks, so directory trees spread over the disk.
func (fs *FS) pickDirGroup(pgrp uint32) uint32 {
	g := &fs.geo
	avgBlocks := fs.freeBlocks / uint64(g.groups)
	step := g.groupsPerFlex
	start := (pgrp/step + 1) * step % g.groups
	for i := uint32(0); i < g.groups; i += step {
		grp := (start + i) % g.groups
		for k := grp; k < grp+step && k < g.groups; k++ {
			d := fs.groups[k].desc
			if d.FreeInodes() > 0 && uint64(d.FreeBlocks()) >= avgBlocks {
				return k
			}
		}
	}
	return pgrp
}

// freeInode releases inode ino in the bitmaps.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) freeInode(ino Ino, dir bool) error {
	grp, idx := fs.geo.groupOfInode(ino)
	b, err := fs.inodeBitmap(grp)
	if err != nil {
		return err
	}
	bm := fs.modify(b)
	if !testBit(bm, idx) {
		return corruptf("inode %d freed twice", ino)
	}
	clearBit(bm, idx)
	d := fs.groups[grp].desc
	d.SetFreeInodes(d.FreeInodes() + 1)
	if dir && d.UsedDirs() > 0 {
		d.SetUsedDirs(d.UsedDirs() - 1)
	}
	fs.groups[grp].inodeBitmapDirty = true
	fs.markGroupDirty(grp)
	fs.freeInodes++
	return nil
}

// firstZero returns the first clear bit of bm in [from, limit), or limit.
func firstZero(bm []byte, from, limit uint32) uint32 {
	i := from
	for i < limit {
		if i%64 == 0 && i+64 <= limit {
			w := le64(bm[i/8:])
			if w == ^uint64(0) {
				i += 64
				continue
			}
			return i + uint32(bits.TrailingZeros64(^w))
		}
		if !testBit(bm, i) {
			return i
		}
		i++
	}
	return limit
}
