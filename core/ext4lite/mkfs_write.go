package ext4lite

import (
	"encoding/binary"
	"fmt"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
	"z.gfire.dev/gvx/core/ext4lite/jbd2"
)

// write lays the planned filesystem onto dev.
func (l *mkfsLayout) write(dev blockdev.Device, opts MkfsOptions) error {
	g := &l.geo
	sb := l.sb
	bs := g.blockSize
	w := &blockWriter{dev: dev, bs: bs, blocks: map[uint64][]byte{}}
	if !opts.Zeroed {
		for grp := range g.groups {
			if err := zeroBlocks(dev, l.descs[grp].InodeTable(), uint64(g.itableBlocks), bs); err != nil {
				return err
			}
		}
		for _, e := range l.journal {
			if err := zeroBlocks(dev, e.Physical, uint64(e.Len), bs); err != nil {
				return err
			}
		}
	}
	// Inode bitmap of group 0: the reserved inodes and lost+found.
	ibm := make([]byte, bs)
	for i := range uint32(disk.GoodOldFirstIno) {
		setBit(ibm, i)
	}
	for i := g.ipg; i < uint32(bs)*8; i++ {
		setBit(ibm, i)
	}
	w.put(l.descs[0].InodeBitmap(), ibm)
	if err := l.writeInodes(w, opts); err != nil {
		return err
	}
	l.bitmap(g.groups - 1) // the last group always gets a real bitmap
	var freeBlocks, freeInodes uint64
	for grp := range g.groups {
		d := l.descs[grp]
		flags := uint16(disk.BGItableZeroed)
		unused := g.ipg
		freeI := g.ipg
		if grp == 0 {
			unused -= disk.GoodOldFirstIno
			freeI -= disk.GoodOldFirstIno
			d.SetUsedDirs(2)
			d.SetInodeBitmapCsum(disk.BitmapCsum(sb, ibm[:g.ipg/8]))
		} else {
			flags |= disk.BGInodeUninit
		}
		used := g.superOverhead(grp)
		if bm, ok := l.bitmaps[grp]; ok {
			used = l.used[grp]
			d.SetBlockBitmapCsum(disk.BitmapCsum(sb, bm[:g.bpg/8]))
			w.put(d.BlockBitmap(), bm)
		} else {
			flags |= disk.BGBlockUninit
		}
		d.SetFlags(flags)
		d.SetItableUnused(unused)
		d.SetFreeInodes(freeI)
		d.SetFreeBlocks(g.blocksInGroup(grp) - used)
		d.UpdateChecksum(sb, grp)
		freeBlocks += uint64(g.blocksInGroup(grp) - used)
		freeInodes += uint64(freeI)
	}
	sb.SetFreeBlocksCountRaw(freeBlocks)
	sb.SetFreeInodesCount(uint32(freeInodes))
	var overhead uint64
	for grp := range g.groups {
		overhead += uint64(g.superOverhead(grp)) + 2 + uint64(g.itableBlocks)
	}
	for _, e := range l.journal {
		overhead += uint64(e.Len)
	}
	sb.SetOverheadClusters(uint32(overhead))
	sb.UpdateChecksum()

	// The group descriptor table and superblock, primary and backups.
	gdt := make([]byte, int(g.gdtBlocks)*bs)
	for grp, d := range l.descs {
		copy(gdt[grp*g.descSize:], d)
	}
	for grp := range g.groups {
		if !g.hasSuper(grp) {
			continue
		}
		start := g.groupStart(grp)
		copySb := *sb
		off := 0
		if grp == 0 {
			off = disk.SuperblockOffset
		} else {
			copySb.SetBlockGroupNr(uint16(grp))
			copySb.UpdateChecksum()
		}
		blk := make([]byte, bs)
		copy(blk[off:], copySb[:])
		w.put(start, blk)
		for k := range g.gdtBlocks {
			w.put(start+1+uint64(k), gdt[int(k)*bs:int(k+1)*bs])
		}
	}
	jsb := jbd2.NewSuperblock(bs, journalLen(l.journal), sb.UUID())
	jb := make([]byte, bs)
	copy(jb, jsb[:])
	w.put(l.journal[0].Physical, jb)
	return w.flush()
}

func journalLen(exts []disk.Extent) uint32 {
	var n uint32
	for _, e := range exts {
		n += e.Len
	}
	return n
}

// writeInodes writes the reserved inodes, the root directory and
// lost+found, the journal inode and the resize inode.
func (l *mkfsLayout) writeInodes(w *blockWriter, opts MkfsOptions) error {
	g := &l.geo
	sb := l.sb
	bs := g.blockSize
	seed := sb.CsumSeed()
	itable := make([]byte, int(g.itableBlocks)*bs)
	inode := func(ino Ino) disk.Inode {
		off := int(ino-1) * g.inodeSize
		return disk.Inode(itable[off : off+g.inodeSize])
	}
	stamp := func(n disk.Inode) {
		n.SetAtime(l.now)
		n.SetCtime(l.now)
		n.SetMtime(l.now)
		n.SetCrtime(l.now)
	}
	newInode := func(ino Ino, mode uint16, links uint16) disk.Inode {
		n := inode(ino)
		n.SetExtraIsize(mkfsExtraIsize)
		n.SetMode(mode)
		n.SetLinks(links)
		stamp(n)
		return n
	}
	blocksPerSector := uint64(bs / 512)

	// Inode 1 (bad blocks) only carries timestamps, as mke2fs leaves it.
	bad := inode(disk.BadIno)
	bad.SetAtime(l.now)
	bad.SetCtime(l.now)
	bad.SetMtime(l.now)

	end := bs - disk.DirTailSize
	dirBlock := func(ino Ino) []byte { return make([]byte, bs) }
	rootSeed := disk.InodeCsumSeed(seed, disk.RootIno, 0)
	lpfSeed := disk.InodeCsumSeed(seed, disk.LostFoundIno, 0)

	root := newInode(disk.RootIno, disk.ModeDir|0o755, 3)
	root.SetUID(opts.Root.UID)
	root.SetGID(opts.Root.GID)
	root.SetSize(uint64(bs))
	root.SetSectors(blocksPerSector)
	setExtents(root, []disk.Extent{{Logical: 0, Len: 1, Physical: l.rootBlk}})
	rb := dirBlock(disk.RootIno)
	disk.PutDirEntry(rb, 0, disk.RootIno, 12, disk.FtDir, []byte("."))
	disk.PutDirEntry(rb, 12, disk.RootIno, 12, disk.FtDir, []byte(".."))
	disk.PutDirEntry(rb, 24, disk.LostFoundIno, end-24, disk.FtDir, []byte("lost+found"))
	disk.PutDirTail(rb, rootSeed)
	w.put(l.rootBlk, rb)

	lpf := newInode(disk.LostFoundIno, disk.ModeDir|0o700, 2)
	lpf.SetSize(uint64(bs) * mkfsLostFoundLen)
	lpf.SetSectors(blocksPerSector * mkfsLostFoundLen)
	setExtents(lpf, []disk.Extent{{Logical: 0, Len: mkfsLostFoundLen, Physical: l.lpfBlk}})
	for k := range uint64(mkfsLostFoundLen) {
		b := dirBlock(disk.LostFoundIno)
		if k == 0 {
			disk.PutDirEntry(b, 0, disk.LostFoundIno, 12, disk.FtDir, []byte("."))
			disk.PutDirEntry(b, 12, disk.RootIno, end-12, disk.FtDir, []byte(".."))
		} else {
			disk.PutDirEntry(b, 0, 0, end, 0, nil)
		}
		disk.PutDirTail(b, lpfSeed)
		w.put(l.lpfBlk+k, b)
	}

	j := newInode(disk.JournalIno, disk.ModeReg|0o600, 1)
	jlen := uint64(journalLen(l.journal))
	j.SetSize(jlen * uint64(bs))
	sectors := jlen * blocksPerSector
	if len(l.journal) > rootExtentCap {
		leaf, err := l.alloc(l.journal[0].Physical, 1)
		if err != nil {
			return err
		}
		sectors += blocksPerSector
		node := &disk.ExtentNode{Max: uint16(disk.ExtentNodeCapacity(bs, false)), Leaves: l.journal}
		b := make([]byte, bs)
		disk.MarshalExtentNode(b, node)
		disk.SetExtentBlockChecksum(b, disk.InodeCsumSeed(seed, disk.JournalIno, 0))
		w.put(leaf, b)
		j.SetFlags(disk.FlagExtents)
		disk.MarshalExtentNode(j.IBlock(), &disk.ExtentNode{Depth: 1, Max: rootExtentCap,
			Indexes: []disk.ExtentIndex{{Logical: 0, Child: leaf}}})
	} else {
		setExtents(j, l.journal)
	}
	j.SetSectors(sectors)
	var backup [17]uint32
	for i := range disk.NBlocks {
		backup[i] = binary.LittleEndian.Uint32(j.IBlock()[4*i:])
	}
	backup[15] = uint32(j.Size() >> 32)
	backup[16] = uint32(j.Size())
	sb.SetJnlBlocks(backup)

	if err := l.writeResizeInode(w, newInode(disk.ResizeIno, disk.ModeReg|0o600, 1)); err != nil {
		return err
	}
	for _, ino := range []Ino{disk.BadIno, disk.RootIno, disk.ResizeIno, disk.JournalIno, disk.LostFoundIno} {
		n := inode(ino)
		if n.IsZero() {
			continue
		}
		n.UpdateChecksum(seed, ino)
	}
	// Only the blocks holding the inodes written need writing.
	last := int(disk.GoodOldFirstIno) * g.inodeSize
	for off := 0; off < last; off += bs {
		w.put(l.descs[0].InodeTable()+uint64(off/bs), itable[off:off+bs])
	}
	return nil
}

// setExtents stores up to four extents in the inode's i_block.
func setExtents(n disk.Inode, exts []disk.Extent) {
	n.SetFlags(n.Flags() | disk.FlagExtents)
	disk.MarshalExtentNode(n.IBlock(), &disk.ExtentNode{Max: rootExtentCap, Leaves: exts})
}

// writeResizeInode builds inode 7, which owns the reserved group
// descriptor blocks through a double indirect block, so that resize2fs can
// grow the table: the primary reserved blocks serve as its indirect blocks
// and list their copies in the backup groups.
func (l *mkfsLayout) writeResizeInode(w *blockWriter, n disk.Inode) error {
	g := &l.geo
	bs := g.blockSize
	apb := uint64(bs / 4)
	n.SetSize((apb*apb + apb + directBlocks) * uint64(bs))
	dind := make([]byte, bs)
	var backups []uint32
	for grp := uint32(1); grp < g.groups; grp++ {
		if g.hasSuper(grp) {
			backups = append(backups, grp)
		}
	}
	blocks := uint64(1)
	for k := range uint64(g.reservedGdt) {
		gdtBlk := g.sbBlock + 1 + uint64(g.gdtBlocks) + k
		binary.LittleEndian.PutUint32(dind[4*((uint64(g.gdtBlocks)+k)%apb):], uint32(gdtBlk))
		ind := make([]byte, bs)
		for i, grp := range backups {
			binary.LittleEndian.PutUint32(ind[4*i:], uint32(gdtBlk+uint64(grp)*uint64(g.bpg)))
		}
		w.put(gdtBlk, ind)
		blocks += 1 + uint64(len(backups))
	}
	w.put(l.dindBlk, dind)
	binary.LittleEndian.PutUint32(n.IBlock()[4*dindBlock:], uint32(l.dindBlk))
	n.SetSectors(blocks * uint64(bs/512))
	return nil
}

// blockWriter collects blocks and writes them in order.
type blockWriter struct {
	dev    blockdev.Device
	bs     int
	blocks map[uint64][]byte
}

func (w *blockWriter) put(blk uint64, data []byte) { w.blocks[blk] = data }

func (w *blockWriter) flush() error {
	for blk, data := range w.blocks {
		if _, err := w.dev.WriteAt(data, int64(blk)*int64(w.bs)); err != nil {
			return fmt.Errorf("ext4lite: mkfs: write block %d: %w", blk, err)
		}
	}
	return nil
}

// zeroBlocks zeroes n blocks from blk, by discarding when the device
// zeroes discarded ranges and by writing zeros otherwise.
func zeroBlocks(dev blockdev.Device, blk, n uint64, bs int) error {
	if z, ok := dev.(blockdev.Zeroer); ok {
		return z.ZeroRange(int64(blk)*int64(bs), int64(n)*int64(bs))
	}
	zero := make([]byte, 256*bs)
	for n > 0 {
		k := min(n, 256)
		if _, err := dev.WriteAt(zero[:k*uint64(bs)], int64(blk)*int64(bs)); err != nil {
			return fmt.Errorf("ext4lite: mkfs: zero blocks: %w", err)
		}
		blk += k
		n -= k
	}
	return nil
}
