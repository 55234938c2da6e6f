package disk

// Reserved inode numbers.
const (
	BadIno         = 1
	RootIno        = 2
	UsrQuotaIno    = 3
	GrpQuotaIno    = 4
	BootLoaderIno  = 5
	UndelDirIno    = 6
	ResizeIno      = 7
	JournalIno     = 8
	ExcludeIno     = 9
	ReplicaIno     = 10
	LostFoundIno   = 11 // by convention, the first inode mkfs hands out
	LinkMax        = 65000
	NBlocks        = 15 // words in i_block
	IBlockSize     = 4 * NBlocks
	MaxFastSymlink = IBlockSize - 1
)

// File type bits of i_mode.
const (
	ModeFmt  = 0xF000
	ModeSock = 0xC000
	ModeLnk  = 0xA000
	ModeReg  = 0x8000
	ModeBlk  = 0x6000
	ModeDir  = 0x4000
	ModeChr  = 0x2000
	ModeFifo = 0x1000
)

// Inode flags (i_flags).
const (
	FlagSecrm       = 0x1
	FlagUnrm        = 0x2
	FlagCompr       = 0x4
	FlagSync        = 0x8
	FlagImmutable   = 0x10
	FlagAppend      = 0x20
	FlagNodump      = 0x40
	FlagNoatime     = 0x80
	FlagEncrypt     = 0x800
	FlagIndex       = 0x1000
	FlagImagic      = 0x2000
	FlagJournalData = 0x4000
	FlagNotail      = 0x8000
	FlagDirsync     = 0x10000
	FlagTopdir      = 0x20000
	FlagHugeFile    = 0x40000
	FlagExtents     = 0x80000
	FlagVerity      = 0x100000
	FlagEAInode     = 0x200000
	FlagInlineData  = 0x10000000
	FlagProjinherit = 0x20000000
	FlagCasefold    = 0x40000000
)

// Field offsets in an inode.
const (
	inMode        = 0x0
	inUID         = 0x2
	inSizeLo      = 0x4
	inAtime       = 0x8
	inCtime       = 0xC
	inMtime       = 0x10
	inDtime       = 0x14
	inGID         = 0x18
	inLinks       = 0x1A
	inBlocksLo    = 0x1C
	inFlags       = 0x20
	inVersion     = 0x24
	inBlock       = 0x28
	inGeneration  = 0x64
	inFileACLLo   = 0x68
	inSizeHigh    = 0x6C
	inBlocksHi    = 0x74
	inFileACLHi   = 0x76
	inUIDHigh     = 0x78
	inGIDHigh     = 0x7A
	inChecksumLo  = 0x7C
	inExtraIsize  = 0x80
	inChecksumHi  = 0x82
	inCtimeExtra  = 0x84
	inMtimeExtra  = 0x88
	inAtimeExtra  = 0x8C
	inCrtime      = 0x90
	inCrtimeExtra = 0x94
	inVersionHi   = 0x98
	inProjid      = 0x9C
)

// Inode is one raw on-disk inode: the superblock's inode size, a power of
// two from 128 bytes.
type Inode []byte

func (n Inode) u16(off int) uint16      { return le.Uint16(n[off:]) }
func (n Inode) u32(off int) uint32      { return le.Uint32(n[off:]) }
func (n Inode) put16(off int, v uint16) { le.PutUint16(n[off:], v) }
func (n Inode) put32(off int, v uint32) { le.PutUint32(n[off:], v) }

// ExtraIsize is i_extra_isize, 0 for 128-byte inodes.
func (n Inode) ExtraIsize() int {
	if len(n) < inExtraIsize+2 {
		return 0
	}
	return int(n.u16(inExtraIsize))
}

// SetExtraIsize sets i_extra_isize.
func (n Inode) SetExtraIsize(v uint16) { n.put16(inExtraIsize, v) }

// hasExtra reports whether the extra field ending at byte end (from the
// start of the inode) is present.
func (n Inode) hasExtra(end int) bool {
	return len(n) > GoodOldInodeSize && GoodOldInodeSize+n.ExtraIsize() >= end
}

// Mode is i_mode.
func (n Inode) Mode() uint16 { return n.u16(inMode) }

// SetMode sets i_mode.
func (n Inode) SetMode(v uint16) { n.put16(inMode, v) }

// FileType is i_mode's S_IFMT bits.
func (n Inode) FileType() uint16 { return n.Mode() & ModeFmt }

// IsDir reports whether the inode is a directory.
func (n Inode) IsDir() bool { return n.FileType() == ModeDir }

// IsReg reports whether the inode is a regular file.
func (n Inode) IsReg() bool { return n.FileType() == ModeReg }

// IsSymlink reports whether the inode is a symbolic link.
func (n Inode) IsSymlink() bool { return n.FileType() == ModeLnk }

// UID is the owner.
func (n Inode) UID() uint32 { return uint32(n.u16(inUID)) | uint32(n.u16(inUIDHigh))<<16 }

// SetUID sets the owner.
func (n Inode) SetUID(v uint32) { n.put16(inUID, uint16(v)); n.put16(inUIDHigh, uint16(v>>16)) }

// GID is the group.
func (n Inode) GID() uint32 { return uint32(n.u16(inGID)) | uint32(n.u16(inGIDHigh))<<16 }

// SetGID sets the group.
func (n Inode) SetGID(v uint32) { n.put16(inGID, uint16(v)); n.put16(inGIDHigh, uint16(v>>16)) }

// Size is i_size.
func (n Inode) Size() uint64 { return uint64(n.u32(inSizeLo)) | uint64(n.u32(inSizeHigh))<<32 }

// SetSize sets i_size.
func (n Inode) SetSize(v uint64) { n.put32(inSizeLo, uint32(v)); n.put32(inSizeHigh, uint32(v>>32)) }

// Links is i_links_count.
func (n Inode) Links() uint16 { return n.u16(inLinks) }

// SetLinks sets i_links_count.
func (n Inode) SetLinks(v uint16) { n.put16(inLinks, v) }

// Dtime is i_dtime; on the orphan list it holds the next orphan.
func (n Inode) Dtime() uint32 { return n.u32(inDtime) }

// SetDtime sets i_dtime.
func (n Inode) SetDtime(v uint32) { n.put32(inDtime, v) }

// Flags is i_flags.
func (n Inode) Flags() uint32 { return n.u32(inFlags) }

// SetFlags sets i_flags.
func (n Inode) SetFlags(v uint32) { n.put32(inFlags, v) }

// Generation is i_generation.
func (n Inode) Generation() uint32 { return n.u32(inGeneration) }

// SetGeneration sets i_generation.
func (n Inode) SetGeneration(v uint32) { n.put32(inGeneration, v) }

// FileACL is the block holding the inode's external extended attributes.
func (n Inode) FileACL() uint64 {
	return uint64(n.u32(inFileACLLo)) | uint64(n.u16(inFileACLHi))<<32
}

// SetFileACL sets it.
func (n Inode) SetFileACL(v uint64) {
	n.put32(inFileACLLo, uint32(v))
	n.put16(inFileACLHi, uint16(v>>32))
}

// BlocksRaw is the 48-bit i_blocks field, in 512-byte sectors unless the
// inode has FlagHugeFile (then in filesystem blocks).
func (n Inode) BlocksRaw() uint64 {
	return uint64(n.u32(inBlocksLo)) | uint64(n.u16(inBlocksHi))<<32
}

// Sectors returns i_blocks in 512-byte units.
func (n Inode) Sectors(blockSize int) uint64 {
	if n.Flags()&FlagHugeFile != 0 {
		return n.BlocksRaw() * uint64(blockSize/512)
	}
	return n.BlocksRaw()
}

// SetSectors sets i_blocks in 512-byte units and clears FlagHugeFile.
func (n Inode) SetSectors(v uint64) {
	n.put32(inBlocksLo, uint32(v))
	n.put16(inBlocksHi, uint16(v>>32))
	n.SetFlags(n.Flags() &^ FlagHugeFile)
}

// IBlock returns the 60-byte i_block area (extent root, block map, fast
// symlink target or device number). It aliases the inode.
func (n Inode) IBlock() []byte { return n[inBlock : inBlock+IBlockSize] }

// Timestamp is a decoded inode timestamp.
type Timestamp struct {
	Sec  int64
	Nsec uint32
}

func (n Inode) time(base, extra int) Timestamp {
	t := Timestamp{Sec: int64(int32(n.u32(base)))}
	if n.hasExtra(extra + 4) {
		x := n.u32(extra)
		t.Sec += int64(x&3) << 32
		t.Nsec = x >> 2
	}
	return t
}

// Timestamp limits: 32-bit seconds without the extra fields, two more
// epoch bits with them (as the kernel's s_time_min/s_time_max).
const (
	MinTime      = -1 << 31
	MaxTime      = 1<<31 - 1
	MaxExtraTime = 1<<34 - 1 - 1<<31
)

func (n Inode) setTime(base, extra int, t Timestamp) {
	if !n.hasExtra(extra + 4) {
		n.put32(base, uint32(min(max(t.Sec, MinTime), MaxTime)))
		return
	}
	if t.Sec < MinTime || t.Sec > MaxExtraTime {
		t.Sec = min(max(t.Sec, MinTime), MaxExtraTime)
		t.Nsec = 0
	}
	n.put32(base, uint32(t.Sec))
	epoch := uint32((t.Sec-int64(int32(t.Sec)))>>32) & 3
	n.put32(extra, epoch|t.Nsec<<2)
}

// Atime is the access time.
func (n Inode) Atime() Timestamp { return n.time(inAtime, inAtimeExtra) }

// SetAtime sets it.
func (n Inode) SetAtime(t Timestamp) { n.setTime(inAtime, inAtimeExtra, t) }

// Mtime is the modification time.
func (n Inode) Mtime() Timestamp { return n.time(inMtime, inMtimeExtra) }

// SetMtime sets it.
func (n Inode) SetMtime(t Timestamp) { n.setTime(inMtime, inMtimeExtra, t) }

// Ctime is the change time.
func (n Inode) Ctime() Timestamp { return n.time(inCtime, inCtimeExtra) }

// SetCtime sets it.
func (n Inode) SetCtime(t Timestamp) { n.setTime(inCtime, inCtimeExtra, t) }

// Crtime is the creation time (zero for 128-byte inodes).
func (n Inode) Crtime() Timestamp {
	if !n.hasExtra(inCrtime + 4) {
		return Timestamp{}
	}
	return n.time(inCrtime, inCrtimeExtra)
}

// SetCrtime sets it, if the inode has room for it.
func (n Inode) SetCrtime(t Timestamp) {
	if n.hasExtra(inCrtime + 4) {
		n.setTime(inCrtime, inCrtimeExtra, t)
	}
}

// Rdev decodes the device number of a character or block device inode.
func (n Inode) Rdev() (major, minor uint32) {
	b := n.IBlock()
	if old := le.Uint32(b[0:]); old != 0 {
		return (old >> 8) & 0xFF, old & 0xFF
	}
	dev := le.Uint32(b[4:])
	return (dev & 0xFFF00) >> 8, (dev & 0xFF) | (dev>>12)&0xFFF00
}

// SetRdev encodes a device number the way the kernel does: the old 16-bit
// encoding in i_block[0] when it fits, the new one in i_block[1] otherwise.
func (n Inode) SetRdev(major, minor uint32) {
	b := n.IBlock()
	clear(b)
	if major < 256 && minor < 256 {
		le.PutUint32(b[0:], major<<8|minor)
		return
	}
	le.PutUint32(b[4:], (minor&0xFF)|(major&0xFFF)<<8|(minor&^0xFF)<<12)
}

// InlineXattrOffset is the offset of the in-inode extended attribute area
// (its magic), or 0 if the inode has none.
func (n Inode) InlineXattrOffset() int {
	if len(n) <= GoodOldInodeSize {
		return 0
	}
	off := GoodOldInodeSize + n.ExtraIsize()
	if off+4 > len(n) {
		return 0
	}
	return off
}

// ComputeChecksum returns the metadata_csum checksum of inode number ino.
func (n Inode) ComputeChecksum(seed, ino uint32) uint32 {
	var b [4]byte
	le.PutUint32(b[:], ino)
	c := Crc32c(seed, b[:])
	le.PutUint32(b[:], n.Generation())
	c = Crc32c(c, b[:])
	c = Crc32c(c, n[:inChecksumLo])
	c = Crc32c(c, []byte{0, 0})
	c = Crc32c(c, n[inChecksumLo+2:GoodOldInodeSize])
	if len(n) > GoodOldInodeSize {
		c = Crc32c(c, n[GoodOldInodeSize:inChecksumHi])
		if n.hasExtra(inChecksumHi + 2) {
			c = Crc32c(c, []byte{0, 0})
		} else {
			c = Crc32c(c, n[inChecksumHi:inChecksumHi+2])
		}
		c = Crc32c(c, n[inChecksumHi+2:])
	}
	return c
}

// Checksum returns the stored checksum.
func (n Inode) Checksum() uint32 {
	c := uint32(n.u16(inChecksumLo))
	if n.hasExtra(inChecksumHi + 2) {
		c |= uint32(n.u16(inChecksumHi)) << 16
	}
	return c
}

// VerifyChecksum reports whether the stored checksum is right.
func (n Inode) VerifyChecksum(seed, ino uint32) bool {
	c := n.ComputeChecksum(seed, ino)
	if !n.hasExtra(inChecksumHi + 2) {
		c &= 0xFFFF
	}
	return c == n.Checksum()
}

// UpdateChecksum stores the checksum.
func (n Inode) UpdateChecksum(seed, ino uint32) {
	c := n.ComputeChecksum(seed, ino)
	n.put16(inChecksumLo, uint16(c))
	if n.hasExtra(inChecksumHi + 2) {
		n.put16(inChecksumHi, uint16(c>>16))
	}
}

// IsZero reports whether the inode bytes are all zero (never used).
func (n Inode) IsZero() bool {
	for _, b := range n {
		if b != 0 {
			return false
		}
	}
	return true
}

// CheckInode validates the fields of an in-use inode that code relies on to
// stay in bounds.
func CheckInode(n Inode, ino uint32) error {
	if len(n) > GoodOldInodeSize {
		x := n.ExtraIsize()
		if x < 0 || GoodOldInodeSize+x > len(n) || x%4 != 0 {
			return Corruptf("inode %d: extra size %d does not fit %d-byte inode", ino, x, len(n))
		}
	}
	switch n.FileType() {
	case ModeReg, ModeDir, ModeLnk, ModeChr, ModeBlk, ModeFifo, ModeSock:
	default:
		return Corruptf("inode %d: unknown file type %#o", ino, n.FileType())
	}
	return nil
}
