package disk

// Group descriptor flags.
const (
	BGInodeUninit  = 0x1
	BGBlockUninit  = 0x2
	BGItableZeroed = 0x4
)

// Field offsets in a group descriptor.
const (
	gdBlockBitmapLo     = 0x0
	gdInodeBitmapLo     = 0x4
	gdInodeTableLo      = 0x8
	gdFreeBlocksLo      = 0xC
	gdFreeInodesLo      = 0xE
	gdUsedDirsLo        = 0x10
	gdFlags             = 0x12
	gdBlockBitmapCsumLo = 0x18
	gdInodeBitmapCsumLo = 0x1A
	gdItableUnusedLo    = 0x1C
	gdChecksum          = 0x1E
	gdBlockBitmapHi     = 0x20
	gdInodeBitmapHi     = 0x24
	gdInodeTableHi      = 0x28
	gdFreeBlocksHi      = 0x2C
	gdFreeInodesHi      = 0x2E
	gdUsedDirsHi        = 0x30
	gdItableUnusedHi    = 0x32
	gdBlockBitmapCsumHi = 0x38
	gdInodeBitmapCsumHi = 0x3A
	gdEnd64             = 0x40
)

// GroupDesc is one raw group descriptor, 32 bytes or (with 64bit) the
// superblock's descriptor size.
type GroupDesc []byte

func (g GroupDesc) is64() bool { return len(g) >= gdEnd64 }

func (g GroupDesc) u32pair(lo, hi int) uint64 {
	v := uint64(le.Uint32(g[lo:]))
	if g.is64() {
		v |= uint64(le.Uint32(g[hi:])) << 32
	}
	return v
}

func (g GroupDesc) put32pair(lo, hi int, v uint64) {
	le.PutUint32(g[lo:], uint32(v))
	if g.is64() {
		le.PutUint32(g[hi:], uint32(v>>32))
	}
}

func (g GroupDesc) u16pair(lo, hi int) uint32 {
	v := uint32(le.Uint16(g[lo:]))
	if g.is64() {
		v |= uint32(le.Uint16(g[hi:])) << 16
	}
	return v
}

func (g GroupDesc) put16pair(lo, hi int, v uint32) {
	le.PutUint16(g[lo:], uint16(v))
	if g.is64() {
		le.PutUint16(g[hi:], uint16(v>>16))
	}
}

// BlockBitmap is the block number of the group's block bitmap.
func (g GroupDesc) BlockBitmap() uint64 { return g.u32pair(gdBlockBitmapLo, gdBlockBitmapHi) }

// SetBlockBitmap sets it.
func (g GroupDesc) SetBlockBitmap(v uint64) { g.put32pair(gdBlockBitmapLo, gdBlockBitmapHi, v) }

// InodeBitmap is the block number of the group's inode bitmap.
func (g GroupDesc) InodeBitmap() uint64 { return g.u32pair(gdInodeBitmapLo, gdInodeBitmapHi) }

// SetInodeBitmap sets it.
func (g GroupDesc) SetInodeBitmap(v uint64) { g.put32pair(gdInodeBitmapLo, gdInodeBitmapHi, v) }

// InodeTable is the first block of the group's inode table.
func (g GroupDesc) InodeTable() uint64 { return g.u32pair(gdInodeTableLo, gdInodeTableHi) }

// SetInodeTable sets it.
func (g GroupDesc) SetInodeTable(v uint64) { g.put32pair(gdInodeTableLo, gdInodeTableHi, v) }

// FreeBlocks is the group's free block count.
func (g GroupDesc) FreeBlocks() uint32 { return g.u16pair(gdFreeBlocksLo, gdFreeBlocksHi) }

// SetFreeBlocks sets it.
func (g GroupDesc) SetFreeBlocks(v uint32) { g.put16pair(gdFreeBlocksLo, gdFreeBlocksHi, v) }

// FreeInodes is the group's free inode count.
func (g GroupDesc) FreeInodes() uint32 { return g.u16pair(gdFreeInodesLo, gdFreeInodesHi) }

// SetFreeInodes sets it.
func (g GroupDesc) SetFreeInodes(v uint32) { g.put16pair(gdFreeInodesLo, gdFreeInodesHi, v) }

// UsedDirs is the number of directories in the group.
func (g GroupDesc) UsedDirs() uint32 { return g.u16pair(gdUsedDirsLo, gdUsedDirsHi) }

// SetUsedDirs sets it.
func (g GroupDesc) SetUsedDirs(v uint32) { g.put16pair(gdUsedDirsLo, gdUsedDirsHi, v) }

// ItableUnused is the number of never-used inodes at the end of the table.
func (g GroupDesc) ItableUnused() uint32 { return g.u16pair(gdItableUnusedLo, gdItableUnusedHi) }

// SetItableUnused sets it.
func (g GroupDesc) SetItableUnused(v uint32) { g.put16pair(gdItableUnusedLo, gdItableUnusedHi, v) }

// Flags is bg_flags.
func (g GroupDesc) Flags() uint16 { return le.Uint16(g[gdFlags:]) }

// SetFlags sets bg_flags.
func (g GroupDesc) SetFlags(v uint16) { le.PutUint16(g[gdFlags:], v) }

// BlockBitmapCsum is the checksum of the block bitmap.
func (g GroupDesc) BlockBitmapCsum() uint32 {
	return g.u16pair(gdBlockBitmapCsumLo, gdBlockBitmapCsumHi)
}

// SetBlockBitmapCsum sets it.
func (g GroupDesc) SetBlockBitmapCsum(v uint32) {
	g.put16pair(gdBlockBitmapCsumLo, gdBlockBitmapCsumHi, v)
}

// InodeBitmapCsum is the checksum of the inode bitmap.
func (g GroupDesc) InodeBitmapCsum() uint32 {
	return g.u16pair(gdInodeBitmapCsumLo, gdInodeBitmapCsumHi)
}

// SetInodeBitmapCsum sets it.
func (g GroupDesc) SetInodeBitmapCsum(v uint32) {
	g.put16pair(gdInodeBitmapCsumLo, gdInodeBitmapCsumHi, v)
}

// Checksum is bg_checksum.
func (g GroupDesc) Checksum() uint16 { return le.Uint16(g[gdChecksum:]) }

// ComputeChecksum returns the descriptor checksum for group number group:
// crc32c (low 16 bits) with metadata_csum, crc16 with uninit_bg, 0 without
// either.
func (g GroupDesc) ComputeChecksum(s *Superblock, group uint32) uint16 {
	var n [4]byte
	le.PutUint32(n[:], group)
	switch {
	case s.HasMetadataCsum():
		c := Crc32c(s.CsumSeed(), n[:])
		c = Crc32c(c, g[:gdChecksum])
		c = Crc32c(c, []byte{0, 0})
		c = Crc32c(c, g[gdChecksum+2:])
		return uint16(c)
	case s.HasGdtCsum():
		u := s.UUID()
		c := Crc16(0xFFFF, u[:])
		c = Crc16(c, n[:])
		c = Crc16(c, g[:gdChecksum])
		if len(g) > gdChecksum+2 {
			c = Crc16(c, g[gdChecksum+2:])
		}
		return c
	}
	return 0
}

// UpdateChecksum stores the descriptor checksum.
func (g GroupDesc) UpdateChecksum(s *Superblock, group uint32) {
	if s.HasGroupCsum() {
		le.PutUint16(g[gdChecksum:], g.ComputeChecksum(s, group))
	}
}

// BitmapCsum returns the metadata_csum checksum of a bitmap; the group
// descriptor stores its low 16 bits, or all 32 with 64-byte descriptors.
func BitmapCsum(s *Superblock, bitmap []byte) uint32 {
	c := Crc32c(s.CsumSeed(), bitmap)
	if s.DescSize() < gdEnd64 {
		c &= 0xFFFF
	}
	return c
}
