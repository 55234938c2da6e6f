package ext4lite

import (
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// geometry is the immutable layout of a filesystem, derived from its
// superblock.
type geometry struct {
	blockSize     int
	blockBits     uint
	blocksCount   uint64
	firstData     uint64
	groups        uint32
	bpg           uint32 // blocks per group
	ipg           uint32 // inodes per group
	inodeSize     int
	inodesCount   uint32
	firstIno      uint32
	itableBlocks  uint32 // inode table blocks per group
	descSize      int
	descPerBlock  int
	gdtBlocks     uint32
	reservedGdt   uint32
	sbBlock       uint64 // block holding the primary superblock
	sbOffset      int    // its offset in that block
	groupsPerFlex uint32
	sparseSuper   bool
	sparseSuper2  bool
	backupBGs     [2]uint32
}

func newGeometry(sb *disk.Superblock) geometry {
	g := geometry{
		blockSize:   sb.BlockSize(),
		blockBits:   uint(10 + sb.LogBlockSize()),
		blocksCount: sb.BlocksCount(),
		firstData:   uint64(sb.FirstDataBlock()),
		groups:      sb.GroupCount(),
		bpg:         sb.BlocksPerGroup(),
		ipg:         sb.InodesPerGroup(),
		inodeSize:   sb.InodeSize(),
		inodesCount: sb.InodesCount(),
		firstIno:    sb.FirstIno(),
		descSize:    sb.DescSize(),
		reservedGdt: uint32(sb.ReservedGdtBlocks()),
		sbBlock:     disk.SuperblockOffset / uint64(sb.BlockSize()),
		sbOffset:    disk.SuperblockOffset % sb.BlockSize(),
		sparseSuper: sb.HasRoCompat(disk.RoCompatSparseSuper),
	}
	g.itableBlocks = uint32((uint64(g.ipg)*uint64(g.inodeSize) + uint64(g.blockSize) - 1) / uint64(g.blockSize))
	g.descPerBlock = g.blockSize / g.descSize
	g.gdtBlocks = (g.groups + uint32(g.descPerBlock) - 1) / uint32(g.descPerBlock)
	g.groupsPerFlex = 1
	if sb.HasIncompat(disk.IncompatFlexBG) {
		g.groupsPerFlex = 1 << sb.LogGroupsPerFlex()
	}
	if sb.HasCompat(disk.CompatSparseSuper2) {
		g.sparseSuper2 = true
		g.backupBGs = sb.BackupBGs()
	}
	return g
}

// groupOfBlock returns the group holding block b.
func (g *geometry) groupOfBlock(b uint64) uint32 {
	return uint32((b - g.firstData) / uint64(g.bpg))
}

// groupStart returns the first block of group grp.
func (g *geometry) groupStart(grp uint32) uint64 {
	return g.firstData + uint64(grp)*uint64(g.bpg)
}

// blocksInGroup is the number of blocks in group grp (the last one may be
// short).
func (g *geometry) blocksInGroup(grp uint32) uint32 {
	if grp+1 < g.groups {
		return g.bpg
	}
	return uint32(g.blocksCount - g.groupStart(grp))
}

// groupOfInode returns the group and index within it of inode ino.
func (g *geometry) groupOfInode(ino uint32) (uint32, uint32) {
	return (ino - 1) / g.ipg, (ino - 1) % g.ipg
}

// hasSuper reports whether group grp holds a superblock (and group
// descriptor) copy.
func (g *geometry) hasSuper(grp uint32) bool {
	if grp == 0 {
		return true
	}
	if g.sparseSuper2 {
		return grp == g.backupBGs[0] || grp == g.backupBGs[1]
	}
	if !g.sparseSuper || grp == 1 {
		return true
	}
	if grp&1 == 0 {
		return false
	}
	return isPowerOf(grp, 3) || isPowerOf(grp, 5) || isPowerOf(grp, 7)
}

func isPowerOf(n, base uint32) bool {
	for n%base == 0 {
		n /= base
	}
	return n == 1
}

// superOverhead is the number of blocks at the start of group grp taken by
// the superblock copy, the group descriptor table and its reserve.
func (g *geometry) superOverhead(grp uint32) uint32 {
	if !g.hasSuper(grp) {
		return 0
	}
	return 1 + g.gdtBlocks + g.reservedGdt
}

// gdtBlock returns the block of the primary group descriptor table holding
// group grp's descriptor, and the descriptor's offset in it.
func (g *geometry) gdtBlock(grp uint32) (uint64, int) {
	return g.sbBlock + 1 + uint64(grp)/uint64(g.descPerBlock), int(grp%uint32(g.descPerBlock)) * g.descSize
}

// maxFileBlocks is one past the last logical block an extent-mapped file
// can use.
func (g *geometry) maxFileBlocks() uint64 { return disk.MaxLogicalBlock - 1 }
