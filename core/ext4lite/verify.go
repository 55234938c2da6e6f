package ext4lite

import (
	"encoding/binary"
	"fmt"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// maxProblems bounds the report of Verify.
const maxProblems = 200

// Verify checks the filesystem on dev without changing it, for when
// e2fsck is not installed: checksums of every structure it reads, the block
// map of every inode (no block claimed twice, none outside the
// filesystem), the bitmaps against what is really used, the free counts of
// groups and superblock, link counts against directory entries, and that
// every inode in use is reachable. It returns the problems found; nil
// means clean. The device is not closed.
func Verify(dev blockdev.Device) ([]string, error) {
	fs, err := Open(noCloseDevice{dev}, Options{ReadOnly: true})
	if err != nil {
		return []string{fmt.Sprintf("cannot open: %v", err)}, nil
	}
	defer fs.Close()
	v := &verifier{fs: fs, owned: make([]uint64, (fs.geo.blocksCount+63)/64),
		xattrRefs: map[uint64]uint32{}, dirRefs: map[Ino]int{}, parents: map[Ino]Ino{}}
	v.run()
	return v.problems, nil
}

// noCloseDevice keeps Verify from closing the caller's device.
type noCloseDevice struct{ blockdev.Device }

func (noCloseDevice) Close() error { return nil }

type verifier struct {
	fs        *FS
	problems  []string
	owned     []uint64 // blocks found in use
	xattrRefs map[uint64]uint32
	inUse     []Ino
	isDir     map[Ino]bool
	links     map[Ino]uint16
	dirRefs   map[Ino]int // directory entries naming an inode (not . and ..)
	parents   map[Ino]Ino // directory -> the directory naming it
	dotdot    map[Ino]Ino
	subdirs   map[Ino]int
}

func (v *verifier) problem(format string, args ...any) {
	if len(v.problems) < maxProblems {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
}

// claim records blocks [b, b+n) as used by who.
func (v *verifier) claim(b, n uint64, who string) {
	if b+n > v.fs.geo.blocksCount || b+n < b {
		v.problem("%s uses blocks %d+%d beyond the filesystem", who, b, n)
		return
	}
	for k := b; k < b+n; k++ {
		w, m := k/64, uint64(1)<<(k%64)
		if v.owned[w]&m != 0 {
			v.problem("block %d is used twice (again by %s)", k, who)
			continue
		}
		v.owned[w] |= m
	}
}

func (v *verifier) run() {
	fs := v.fs
	if fs.sb.HasIncompat(disk.IncompatRecover) {
		v.problem("the journal needs recovery (needs_recovery is set)")
	}
	if len(fs.orphans) > 0 {
		v.problem("orphaned inodes wait for release: %v", fs.orphans)
	}
	v.claimMetadata()
	v.isDir, v.links, v.dotdot, v.subdirs = map[Ino]bool{}, map[Ino]uint16{}, map[Ino]Ino{}, map[Ino]int{}
	v.scanInodes()
	v.checkBitmaps()
	v.checkLinks()
}

// claimMetadata marks superblocks, descriptor tables, bitmaps and inode
// tables.
func (v *verifier) claimMetadata() {
	g := &v.fs.geo
	if g.firstData > 0 {
		v.claim(0, g.firstData, "boot block")
	}
	for grp := range g.groups {
		if n := g.superOverhead(grp); n > 0 {
			v.claim(g.groupStart(grp), uint64(n), fmt.Sprintf("group %d superblock copy", grp))
		}
		d := v.fs.groups[grp].desc
		v.claim(d.BlockBitmap(), 1, fmt.Sprintf("group %d block bitmap", grp))
		v.claim(d.InodeBitmap(), 1, fmt.Sprintf("group %d inode bitmap", grp))
		v.claim(d.InodeTable(), uint64(g.itableBlocks), fmt.Sprintf("group %d inode table", grp))
	}
}

// scanInodes reads every inode the bitmaps mark in use and claims its
// blocks.
func (v *verifier) scanInodes() {
	fs := v.fs
	g := &fs.geo
	for grp := range g.groups {
		d := fs.groups[grp].desc
		if d.Flags()&disk.BGInodeUninit != 0 && fs.sb.HasGroupCsum() {
			if d.FreeInodes() != g.ipg {
				v.problem("group %d: INODE_UNINIT but %d of %d inodes free", grp, d.FreeInodes(), g.ipg)
			}
			continue
		}
		b, err := fs.bread(d.InodeBitmap())
		if err != nil {
			v.problem("group %d inode bitmap: %v", grp, err)
			continue
		}
		bm := b.data[:g.ipg/8]
		if fs.csum && d.InodeBitmapCsum() != disk.BitmapCsum(fs.sb, bm) {
			v.problem("group %d inode bitmap checksum is wrong", grp)
		}
		used, dirs := uint32(0), uint32(0)
		for i := range g.ipg {
			if !testBit(bm, i) {
				continue
			}
			used++
			ino := grp*g.ipg + i + 1
			if ino < g.firstIno && ino != disk.RootIno && ino != disk.ResizeIno && ino != fs.sb.JournalInum() {
				continue
			}
			if v.scanInode(ino) {
				dirs++
			}
		}
		if free := g.ipg - used; free != d.FreeInodes() {
			v.problem("group %d: %d inodes free, the descriptor says %d", grp, free, d.FreeInodes())
		}
		if dirs != d.UsedDirs() {
			v.problem("group %d: %d directories, the descriptor says %d", grp, dirs, d.UsedDirs())
		}
	}
}

// scanInode checks one inode in use and returns whether it is a directory.
func (v *verifier) scanInode(ino Ino) bool {
	fs := v.fs
	who := fmt.Sprintf("inode %d", ino)
	raw, err := fs.readRawInode(ino)
	if err != nil {
		v.problem("%s: %v", who, err)
		return false
	}
	if err := disk.CheckInode(raw, ino); err != nil {
		v.problem("%s: %v", who, err)
		return false
	}
	if raw.Links() == 0 && !fs.isOrphan(ino) {
		v.problem("%s is in use but has no links", who)
	}
	if ino == disk.ResizeIno {
		// Its blocks are the reserved descriptor blocks, claimed as
		// metadata, and its double indirect block.
		if dind := uint64(binary.LittleEndian.Uint32(raw.IBlock()[4*dindBlock:])); dind != 0 {
			v.claim(dind, 1, who)
		}
		return false
	}
	n := &inode{ino: ino, raw: raw}
	v.inUse = append(v.inUse, ino)
	v.links[ino] = raw.Links()
	m, err := fs.fileMapOf(n)
	if err != nil {
		v.problem("%s: %v", who, err)
		return raw.IsDir()
	}
	var blocks uint64
	for _, e := range m.exts {
		v.claim(e.Physical, uint64(e.Len), who)
		blocks += uint64(e.Len)
	}
	for _, l := range m.levels {
		for _, blk := range l {
			v.claim(blk, 1, who+" extent tree")
			blocks++
		}
	}
	for _, blk := range m.indirect {
		v.claim(blk, 1, who+" indirect block")
		blocks++
	}
	if acl := raw.FileACL(); acl != 0 {
		blocks++
		if _, _, err := fs.loadXattrs(n); err != nil {
			v.problem("%s: %v", who, err)
		}
		if v.xattrRefs[acl] == 0 {
			v.claim(acl, 1, who+" xattr block")
		}
		v.xattrRefs[acl]++
	} else if _, err := disk.ParseInodeXattrs(raw); err != nil {
		v.problem("%s: %v", who, err)
	}
	if got := fs.blocksOf(n); got != blocks {
		v.problem("%s: i_blocks says %d blocks, it uses %d", who, got, blocks)
	}
	if !raw.IsDir() {
		return false
	}
	v.isDir[ino] = true
	d, err := fs.dirIndexOf(n)
	if err != nil {
		v.problem("%s: %v", who, err)
		return true
	}
	v.dotdot[ino] = d.names[".."].ino
	for name, slot := range d.names {
		if name == "." || name == ".." {
			continue
		}
		v.dirRefs[slot.ino]++
		v.parents[slot.ino] = ino
		if slot.ft == disk.FtDir {
			v.subdirs[ino]++
		}
	}
	return true
}

// checkBitmaps compares each group's block bitmap with the blocks found in
// use, and the free counts.
func (v *verifier) checkBitmaps() {
	fs := v.fs
	g := &fs.geo
	var total uint64
	for grp := range g.groups {
		d := fs.groups[grp].desc
		bm := make([]byte, g.blockSize)
		if d.Flags()&disk.BGBlockUninit != 0 && fs.sb.HasGroupCsum() {
			fs.initBlockBitmap(grp, bm)
		} else {
			b, err := fs.bread(d.BlockBitmap())
			if err != nil {
				v.problem("group %d block bitmap: %v", grp, err)
				continue
			}
			copy(bm, b.data)
			if fs.csum && d.BlockBitmapCsum() != disk.BitmapCsum(fs.sb, bm[:g.bpg/8]) {
				v.problem("group %d block bitmap checksum is wrong", grp)
			}
		}
		start := g.groupStart(grp)
		n := g.blocksInGroup(grp)
		free, reported := uint32(0), 0
		for i := range n {
			blk := start + uint64(i)
			inBitmap := testBit(bm, i)
			used := v.owned[blk/64]&(1<<(blk%64)) != 0
			if !inBitmap {
				free++
			}
			if inBitmap != used && reported < 3 {
				reported++
				if used {
					v.problem("block %d is in use but marked free", blk)
				} else {
					v.problem("block %d is marked in use but nothing uses it", blk)
				}
			}
		}
		if free != d.FreeBlocks() {
			v.problem("group %d: %d blocks free, the descriptor says %d", grp, free, d.FreeBlocks())
		}
		total += uint64(free)
	}
	if total != fs.sb.FreeBlocksCount() {
		v.problem("%d blocks free, the superblock says %d", total, fs.sb.FreeBlocksCount())
	}
	var freeInodes uint64
	for grp := range g.groups {
		freeInodes += uint64(fs.groups[grp].desc.FreeInodes())
	}
	if freeInodes != uint64(fs.sb.FreeInodesCount()) {
		v.problem("%d inodes free, the superblock says %d", freeInodes, fs.sb.FreeInodesCount())
	}
	for blk, refs := range v.xattrRefs {
		b, err := fs.bread(blk)
		if err != nil {
			continue
		}
		h, _, err := disk.ParseXattrBlock(b.data, blk, fs.seed, fs.verify)
		if err == nil && h.Refcount != refs {
			v.problem("xattr block %d has refcount %d, %d inodes use it", blk, h.Refcount, refs)
		}
	}
}

// checkLinks compares link counts with directory entries.
func (v *verifier) checkLinks() {
	fs := v.fs
	for _, ino := range v.inUse {
		if ino == fs.sb.JournalInum() {
			continue
		}
		links := v.links[ino]
		refs := v.dirRefs[ino]
		if v.isDir[ino] {
			if ino != RootIno && refs != 1 {
				v.problem("directory %d has %d names", ino, refs)
			}
			want := 2 + v.subdirs[ino]
			if want > disk.LinkMax {
				want = 1
			}
			if int(links) != want {
				v.problem("directory %d has %d links, want %d", ino, links, want)
			}
			parent := v.parents[ino]
			if ino == RootIno {
				parent = RootIno
			}
			if v.dotdot[ino] != parent {
				v.problem("directory %d has '..' %d, its parent is %d", ino, v.dotdot[ino], parent)
			}
			continue
		}
		if refs == 0 && !fs.isOrphan(ino) {
			v.problem("inode %d is in use but no directory names it", ino)
		}
		if int(links) != refs && !fs.isOrphan(ino) {
			v.problem("inode %d has %d links, %d names", ino, links, refs)
		}
	}
	for ino := range v.dirRefs {
		if _, ok := v.links[ino]; !ok {
			v.problem("a directory names inode %d, which is not in use", ino)
		}
	}
}
