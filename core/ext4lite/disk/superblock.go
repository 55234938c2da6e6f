package disk

import (
	"encoding/binary"
	"fmt"
)

// Superblock geometry.
const (
	SuperblockOffset = 1024
	SuperblockSize   = 1024
	SuperMagic       = 0xEF53
)

// Superblock states and other constants.
const (
	StateValid  = 0x1
	StateErrors = 0x2

	FlagsSignedHash   = 0x1
	FlagsUnsignedHash = 0x2

	ChecksumTypeCrc32c = 1
	JnlBackupBlocks    = 1

	GoodOldFirstIno   = 11
	GoodOldInodeSize  = 128
	RevDynamic        = 1
	MinDescSize       = 32
	MinDescSize64Bit  = 64
	MaxDescSize       = 1024
	DefaultMountUser  = 0x4 // user_xattr
	DefaultMountACL   = 0x8 // acl
	HashHalfMD4       = 1
	ErrorsContinue    = 1
	OSLinux           = 0
	MaxLogBlockSize   = 6 // 64 KiB
	MaxGroupsPerFlex  = 31
	MaxBlocksPerGroup = 65528
)

var le = binary.LittleEndian

// Superblock is the raw ext4 superblock.
type Superblock [SuperblockSize]byte

// Field offsets.
const (
	sbInodesCount       = 0x0
	sbBlocksCountLo     = 0x4
	sbRBlocksCountLo    = 0x8
	sbFreeBlocksLo      = 0xC
	sbFreeInodes        = 0x10
	sbFirstDataBlock    = 0x14
	sbLogBlockSize      = 0x18
	sbLogClusterSize    = 0x1C
	sbBlocksPerGroup    = 0x20
	sbClustersPerGroup  = 0x24
	sbInodesPerGroup    = 0x28
	sbMtime             = 0x2C
	sbWtime             = 0x30
	sbMntCount          = 0x34
	sbMaxMntCount       = 0x36
	sbMagic             = 0x38
	sbState             = 0x3A
	sbErrors            = 0x3C
	sbLastCheck         = 0x40
	sbCreatorOS         = 0x48
	sbRevLevel          = 0x4C
	sbDefResuid         = 0x50
	sbDefResgid         = 0x52
	sbFirstIno          = 0x54
	sbInodeSize         = 0x58
	sbBlockGroupNr      = 0x5A
	sbFeatureCompat     = 0x5C
	sbFeatureIncompat   = 0x60
	sbFeatureRoCompat   = 0x64
	sbUUID              = 0x68
	sbVolumeName        = 0x78
	sbReservedGdtBlocks = 0xCE
	sbJournalInum       = 0xE0
	sbJournalDev        = 0xE4
	sbLastOrphan        = 0xE8
	sbHashSeed          = 0xEC
	sbDefHashVersion    = 0xFC
	sbJnlBackupType     = 0xFD
	sbDescSize          = 0xFE
	sbDefaultMountOpts  = 0x100
	sbFirstMetaBG       = 0x104
	sbMkfsTime          = 0x108
	sbJnlBlocks         = 0x10C
	sbBlocksCountHi     = 0x150
	sbRBlocksCountHi    = 0x154
	sbFreeBlocksHi      = 0x158
	sbMinExtraIsize     = 0x15C
	sbWantExtraIsize    = 0x15E
	sbFlags             = 0x160
	sbLogGroupsPerFlex  = 0x174
	sbChecksumType      = 0x175
	sbKbytesWritten     = 0x178
	sbOverheadClusters  = 0x248
	sbChecksumSeed      = 0x270
	sbChecksum          = 0x3FC
)

func (s *Superblock) u16(off int) uint16      { return le.Uint16(s[off:]) }
func (s *Superblock) u32(off int) uint32      { return le.Uint32(s[off:]) }
func (s *Superblock) put16(off int, v uint16) { le.PutUint16(s[off:], v) }
func (s *Superblock) put32(off int, v uint32) { le.PutUint32(s[off:], v) }
func (s *Superblock) hilo(lo, hi int) uint64  { return uint64(s.u32(lo)) | uint64(s.u32(hi))<<32 }
func (s *Superblock) putHilo(lo, hi int, v uint64) {
	s.put32(lo, uint32(v))
	if s.Is64Bit() {
		s.put32(hi, uint32(v>>32))
	}
}

// InodesCount is s_inodes_count.
func (s *Superblock) InodesCount() uint32 { return s.u32(sbInodesCount) }

// SetInodesCount sets s_inodes_count.
func (s *Superblock) SetInodesCount(v uint32) { s.put32(sbInodesCount, v) }

// BlocksCount is s_blocks_count.
func (s *Superblock) BlocksCount() uint64 {
	if !s.Is64Bit() {
		return uint64(s.u32(sbBlocksCountLo))
	}
	return s.hilo(sbBlocksCountLo, sbBlocksCountHi)
}

// SetBlocksCount sets s_blocks_count.
func (s *Superblock) SetBlocksCount(v uint64) { s.putHilo(sbBlocksCountLo, sbBlocksCountHi, v) }

// RBlocksCount is s_r_blocks_count, the blocks reserved for root.
func (s *Superblock) RBlocksCount() uint64 {
	if !s.Is64Bit() {
		return uint64(s.u32(sbRBlocksCountLo))
	}
	return s.hilo(sbRBlocksCountLo, sbRBlocksCountHi)
}

// SetRBlocksCount sets s_r_blocks_count.
func (s *Superblock) SetRBlocksCount(v uint64) { s.putHilo(sbRBlocksCountLo, sbRBlocksCountHi, v) }

// FreeBlocksCount is s_free_blocks_count.
func (s *Superblock) FreeBlocksCount() uint64 {
	if !s.Is64Bit() {
		return uint64(s.u32(sbFreeBlocksLo))
	}
	return s.hilo(sbFreeBlocksLo, sbFreeBlocksHi)
}

// SetFreeBlocksCount sets s_free_blocks_count.
func (s *Superblock) SetFreeBlocksCount(v uint64) { s.putHilo(sbFreeBlocksLo, sbFreeBlocksHi, v) }

// FreeInodesCount is s_free_inodes_count.
func (s *Superblock) FreeInodesCount() uint32 { return s.u32(sbFreeInodes) }

// SetFreeInodesCount sets s_free_inodes_count.
func (s *Superblock) SetFreeInodesCount(v uint32) { s.put32(sbFreeInodes, v) }

// FirstDataBlock is s_first_data_block.
func (s *Superblock) FirstDataBlock() uint32 { return s.u32(sbFirstDataBlock) }

// LogBlockSize is s_log_block_size (block size is 1024 << it).
func (s *Superblock) LogBlockSize() uint32 { return s.u32(sbLogBlockSize) }

// BlockSize is the block size in bytes. Only meaningful after Validate.
func (s *Superblock) BlockSize() int { return 1024 << s.LogBlockSize() }

// LogClusterSize is s_log_cluster_size.
func (s *Superblock) LogClusterSize() uint32 { return s.u32(sbLogClusterSize) }

// BlocksPerGroup is s_blocks_per_group.
func (s *Superblock) BlocksPerGroup() uint32 { return s.u32(sbBlocksPerGroup) }

// ClustersPerGroup is s_clusters_per_group.
func (s *Superblock) ClustersPerGroup() uint32 { return s.u32(sbClustersPerGroup) }

// InodesPerGroup is s_inodes_per_group.
func (s *Superblock) InodesPerGroup() uint32 { return s.u32(sbInodesPerGroup) }

// Mtime is s_mtime, the last mount time.
func (s *Superblock) Mtime() uint32 { return s.u32(sbMtime) }

// SetMtime sets s_mtime.
func (s *Superblock) SetMtime(v uint32) { s.put32(sbMtime, v) }

// Wtime is s_wtime, the last write time.
func (s *Superblock) Wtime() uint32 { return s.u32(sbWtime) }

// SetWtime sets s_wtime.
func (s *Superblock) SetWtime(v uint32) { s.put32(sbWtime, v) }

// MntCount is s_mnt_count.
func (s *Superblock) MntCount() uint16 { return s.u16(sbMntCount) }

// SetMntCount sets s_mnt_count.
func (s *Superblock) SetMntCount(v uint16) { s.put16(sbMntCount, v) }

// Magic is s_magic.
func (s *Superblock) Magic() uint16 { return s.u16(sbMagic) }

// State is s_state.
func (s *Superblock) State() uint16 { return s.u16(sbState) }

// SetState sets s_state.
func (s *Superblock) SetState(v uint16) { s.put16(sbState, v) }

// RevLevel is s_rev_level.
func (s *Superblock) RevLevel() uint32 { return s.u32(sbRevLevel) }

// FirstIno is the first non-reserved inode number.
func (s *Superblock) FirstIno() uint32 {
	if s.RevLevel() < RevDynamic {
		return GoodOldFirstIno
	}
	return s.u32(sbFirstIno)
}

// InodeSize is the on-disk inode size.
func (s *Superblock) InodeSize() int {
	if s.RevLevel() < RevDynamic {
		return GoodOldInodeSize
	}
	return int(s.u16(sbInodeSize))
}

// FeatureCompat is s_feature_compat.
func (s *Superblock) FeatureCompat() uint32 { return s.u32(sbFeatureCompat) }

// FeatureIncompat is s_feature_incompat.
func (s *Superblock) FeatureIncompat() uint32 { return s.u32(sbFeatureIncompat) }

// SetFeatureIncompat sets s_feature_incompat.
func (s *Superblock) SetFeatureIncompat(v uint32) { s.put32(sbFeatureIncompat, v) }

// FeatureRoCompat is s_feature_ro_compat.
func (s *Superblock) FeatureRoCompat() uint32 { return s.u32(sbFeatureRoCompat) }

// HasCompat reports whether all bits of f are set in s_feature_compat.
func (s *Superblock) HasCompat(f uint32) bool { return s.FeatureCompat()&f == f }

// HasIncompat reports whether all bits of f are set in s_feature_incompat.
func (s *Superblock) HasIncompat(f uint32) bool { return s.FeatureIncompat()&f == f }

// HasRoCompat reports whether all bits of f are set in s_feature_ro_compat.
func (s *Superblock) HasRoCompat(f uint32) bool { return s.FeatureRoCompat()&f == f }

// Is64Bit reports the 64bit feature.
func (s *Superblock) Is64Bit() bool { return s.HasIncompat(Incompat64Bit) }

// HasMetadataCsum reports the metadata_csum feature.
func (s *Superblock) HasMetadataCsum() bool { return s.HasRoCompat(RoCompatMetadataCsum) }

// HasGdtCsum reports the uninit_bg feature (crc16 group checksums).
func (s *Superblock) HasGdtCsum() bool { return s.HasRoCompat(RoCompatGdtCsum) }

// HasGroupCsum reports whether group descriptors carry any checksum, and
// with it the uninit flags.
func (s *Superblock) HasGroupCsum() bool { return s.HasMetadataCsum() || s.HasGdtCsum() }

// UUID is s_uuid.
func (s *Superblock) UUID() [16]byte { return [16]byte(s[sbUUID : sbUUID+16]) }

// SetUUID sets s_uuid.
func (s *Superblock) SetUUID(u [16]byte) { copy(s[sbUUID:], u[:]) }

// VolumeName is s_volume_name without trailing NULs.
func (s *Superblock) VolumeName() string { return cString(s[sbVolumeName : sbVolumeName+16]) }

// ReservedGdtBlocks is s_reserved_gdt_blocks.
func (s *Superblock) ReservedGdtBlocks() uint16 { return s.u16(sbReservedGdtBlocks) }

// JournalInum is s_journal_inum.
func (s *Superblock) JournalInum() uint32 { return s.u32(sbJournalInum) }

// JournalDev is s_journal_dev: the device of an external journal, or 0.
func (s *Superblock) JournalDev() uint32 { return s.u32(sbJournalDev) }

// LastOrphan is s_last_orphan, the head of the orphan inode list.
func (s *Superblock) LastOrphan() uint32 { return s.u32(sbLastOrphan) }

// SetLastOrphan sets s_last_orphan.
func (s *Superblock) SetLastOrphan(v uint32) { s.put32(sbLastOrphan, v) }

// DescSize is the group descriptor size.
func (s *Superblock) DescSize() int {
	if !s.Is64Bit() {
		return MinDescSize
	}
	return int(s.u16(sbDescSize))
}

// LogGroupsPerFlex is s_log_groups_per_flex.
func (s *Superblock) LogGroupsPerFlex() uint8 { return s[sbLogGroupsPerFlex] }

// MinExtraIsize is s_min_extra_isize.
func (s *Superblock) MinExtraIsize() uint16 { return s.u16(sbMinExtraIsize) }

// WantExtraIsize is s_want_extra_isize.
func (s *Superblock) WantExtraIsize() uint16 { return s.u16(sbWantExtraIsize) }

// ChecksumSeed is s_checksum_seed (valid with metadata_csum_seed).
func (s *Superblock) ChecksumSeed() uint32 { return s.u32(sbChecksumSeed) }

// KbytesWritten is s_kbytes_written.
func (s *Superblock) KbytesWritten() uint64 { return le.Uint64(s[sbKbytesWritten:]) }

// SetKbytesWritten sets s_kbytes_written.
func (s *Superblock) SetKbytesWritten(v uint64) { le.PutUint64(s[sbKbytesWritten:], v) }

// OverheadClusters is s_overhead_clusters.
func (s *Superblock) OverheadClusters() uint32 { return s.u32(sbOverheadClusters) }

// JnlBlocks returns the backup of the journal inode's i_block (15 words),
// i_size_high and i_size.
func (s *Superblock) JnlBlocks() [17]uint32 {
	var v [17]uint32
	for i := range v {
		v[i] = s.u32(sbJnlBlocks + 4*i)
	}
	return v
}

// Checksum is s_checksum.
func (s *Superblock) Checksum() uint32 { return s.u32(sbChecksum) }

// ComputeChecksum returns the metadata_csum checksum of the superblock.
func (s *Superblock) ComputeChecksum() uint32 { return Crc32c(^uint32(0), s[:sbChecksum]) }

// UpdateChecksum stores the checksum, if the filesystem uses one.
func (s *Superblock) UpdateChecksum() {
	if s.HasMetadataCsum() {
		s.put32(sbChecksum, s.ComputeChecksum())
	}
}

// CsumSeed is the seed of every metadata checksum: s_checksum_seed with
// metadata_csum_seed, crc32c of the UUID otherwise.
func (s *Superblock) CsumSeed() uint32 {
	if s.HasIncompat(IncompatCsumSeed) {
		return s.ChecksumSeed()
	}
	u := s.UUID()
	return Crc32c(^uint32(0), u[:])
}

// GroupCount is the number of block groups. Only meaningful after Validate.
func (s *Superblock) GroupCount() uint32 {
	n := s.BlocksCount() - uint64(s.FirstDataBlock())
	return uint32((n + uint64(s.BlocksPerGroup()) - 1) / uint64(s.BlocksPerGroup()))
}

// ParseSuperblock decodes and validates the superblock in b, which must hold
// at least SuperblockSize bytes starting at the superblock.
func ParseSuperblock(b []byte) (*Superblock, error) {
	if len(b) < SuperblockSize {
		return nil, Corruptf("superblock is %d bytes, want %d", len(b), SuperblockSize)
	}
	s := new(Superblock)
	copy(s[:], b)
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// ParseSuperblockHeader decodes a superblock checking only its magic and
// checksum, so that its features can be read before its geometry is
// judged.
func ParseSuperblockHeader(b []byte) (*Superblock, error) {
	if len(b) < SuperblockSize {
		return nil, Corruptf("superblock is %d bytes, want %d", len(b), SuperblockSize)
	}
	s := new(Superblock)
	copy(s[:], b)
	if err := s.CheckMagic(); err != nil {
		return nil, err
	}
	return s, nil
}

// CheckMagic checks the magic number and the checksum: whether the
// superblock is intact, before anything in it is trusted.
func (s *Superblock) CheckMagic() error {
	if s.Magic() != SuperMagic {
		return Corruptf("bad superblock magic %#x (not an ext2/3/4 filesystem)", s.Magic())
	}
	if s.HasMetadataCsum() {
		if s[sbChecksumType] != ChecksumTypeCrc32c {
			return Corruptf("superblock checksum type %d, only crc32c (1) exists", s[sbChecksumType])
		}
		if got, want := s.Checksum(), s.ComputeChecksum(); got != want {
			return Corruptf("superblock checksum %#08x, computed %#08x", got, want)
		}
	}
	return nil
}

// Validate checks the magic, the checksum and that the geometry is
// self-consistent, so that code using it cannot divide by zero or index
// outside the device's group table.
func (s *Superblock) Validate() error {
	if err := s.CheckMagic(); err != nil {
		return err
	}
	if s.LogBlockSize() > MaxLogBlockSize {
		return Corruptf("block size 1024<<%d is too large", s.LogBlockSize())
	}
	bs := uint32(s.BlockSize())
	if s.LogClusterSize() != s.LogBlockSize() && !s.HasRoCompat(RoCompatBigalloc) {
		return Corruptf("cluster size differs from block size without bigalloc")
	}
	wantFirst := uint32(0)
	if bs == 1024 {
		wantFirst = 1
	}
	if s.FirstDataBlock() != wantFirst {
		return Corruptf("first data block %d, want %d for %d-byte blocks", s.FirstDataBlock(), wantFirst, bs)
	}
	bpg := s.BlocksPerGroup()
	if bpg == 0 || bpg > 8*bs || bpg%8 != 0 {
		return Corruptf("%d blocks per group (block size %d)", bpg, bs)
	}
	if s.ClustersPerGroup() != bpg && !s.HasRoCompat(RoCompatBigalloc) {
		return Corruptf("clusters per group %d differs from blocks per group %d", s.ClustersPerGroup(), bpg)
	}
	if s.BlocksCount() <= uint64(s.FirstDataBlock()) || s.BlocksCount() >= 1<<48 {
		return Corruptf("block count %d", s.BlocksCount())
	}
	if s.RevLevel() > RevDynamic {
		return Corruptf("revision level %d is newer than this code knows", s.RevLevel())
	}
	isz := s.InodeSize()
	if isz < GoodOldInodeSize || isz > int(bs) || isz&(isz-1) != 0 {
		return Corruptf("inode size %d", isz)
	}
	ipg := s.InodesPerGroup()
	if ipg < bs/uint32(isz) || ipg > 8*bs || ipg%8 != 0 {
		return Corruptf("%d inodes per group", ipg)
	}
	groups := uint64(s.GroupCount())
	if groups == 0 || groups > 1<<32-1 || uint64(ipg)*groups != uint64(s.InodesCount()) {
		return Corruptf("inode count %d is not %d groups of %d inodes", s.InodesCount(), groups, ipg)
	}
	if s.FirstIno() < GoodOldFirstIno || s.FirstIno() >= s.InodesCount() {
		return Corruptf("first inode %d", s.FirstIno())
	}
	ds := s.DescSize()
	if s.Is64Bit() && (ds < MinDescSize64Bit || ds > MaxDescSize || ds&(ds-1) != 0) {
		return Corruptf("group descriptor size %d", ds)
	}
	if s.LogGroupsPerFlex() > MaxGroupsPerFlex {
		return Corruptf("log groups per flex %d", s.LogGroupsPerFlex())
	}
	if isz > GoodOldInodeSize && s.HasRoCompat(RoCompatExtraIsize) {
		if int(s.MinExtraIsize()) > isz-GoodOldInodeSize || int(s.WantExtraIsize()) > isz-GoodOldInodeSize {
			return Corruptf("extra inode size %d/%d does not fit %d-byte inodes", s.MinExtraIsize(), s.WantExtraIsize(), isz)
		}
	}
	// The free counts are not checked: like the kernel, the filesystem
	// recomputes them from the group descriptors.
	return nil
}

// Describe summarizes the superblock for error messages.
func (s *Superblock) Describe() string {
	return fmt.Sprintf("%d blocks of %d bytes, %d groups, %d inodes", s.BlocksCount(), s.BlockSize(), s.GroupCount(), s.InodesCount())
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// BackupBGs is s_backup_bgs, the two backup groups of sparse_super2.
func (s *Superblock) BackupBGs() [2]uint32 {
	return [2]uint32{s.u32(0x24C), s.u32(0x250)}
}

// DefHashVersion is s_def_hash_version.
func (s *Superblock) DefHashVersion() uint8 { return s[sbDefHashVersion] }

// Flags is s_flags.
func (s *Superblock) Flags() uint32 { return s.u32(sbFlags) }

// SetBlocksCountRaw sets s_blocks_count, hi word included, regardless of
// the 64bit feature (for mkfs, before features are final).
func (s *Superblock) SetBlocksCountRaw(v uint64) {
	s.put32(sbBlocksCountLo, uint32(v))
	s.put32(sbBlocksCountHi, uint32(v>>32))
}

// SetRBlocksCountRaw sets s_r_blocks_count, hi word included.
func (s *Superblock) SetRBlocksCountRaw(v uint64) {
	s.put32(sbRBlocksCountLo, uint32(v))
	s.put32(sbRBlocksCountHi, uint32(v>>32))
}

// SetFreeBlocksCountRaw sets s_free_blocks_count, hi word included.
func (s *Superblock) SetFreeBlocksCountRaw(v uint64) {
	s.put32(sbFreeBlocksLo, uint32(v))
	s.put32(sbFreeBlocksHi, uint32(v>>32))
}

// SetBlockGroupNr sets s_block_group_nr (the group a backup lives in).
func (s *Superblock) SetBlockGroupNr(v uint16) { s.put16(sbBlockGroupNr, v) }

// SetJnlBlocks sets the journal inode backup.
func (s *Superblock) SetJnlBlocks(v [17]uint32) {
	for i, w := range v {
		s.put32(sbJnlBlocks+4*i, w)
	}
}

// SetOverheadClusters sets s_overhead_clusters.
func (s *Superblock) SetOverheadClusters(v uint32) { s.put32(sbOverheadClusters, v) }
