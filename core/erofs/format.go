package erofs

import (
	"encoding/binary"
	"hash/crc32"
)

// On-disk constants of the EROFS format (Linux Documentation/filesystems/erofs.rst,
// include/erofs_fs.h). Everything is little endian.
const (
	superMagic  = 0xe0f5e1e2
	superOffset = 1024
	superSize   = 128

	// BlockSize is the only block size gVisor's reader accepts (it must be
	// a multiple of the host page size).
	BlockSize     = 4096
	blockSizeBits = 12

	// Inodes live in 32-byte slots; a nid is an offset from the metadata
	// area divided by the slot size.
	slotSize       = 32
	inodeSize      = 64 // extended inodes only: 32-bit ids, 64-bit size, mtime.
	direntSize     = 12
	maxNameLen     = 255
	featureSBCsum  = 0x1
	layoutExtended = 1

	// Data layouts (bits 1..3 of i_format).
	dataFlatPlain  = 0
	dataFlatInline = 2

	// The metadata area starts at block 0, so the root inode can sit right
	// after the superblock and its nid fits the superblock's 16-bit field.
	rootNid = (superOffset + superSize) / slotSize
)

// Directory entry file types.
const (
	ftUnknown = iota
	ftRegular
	ftDir
	ftChar
	ftBlock
	ftFIFO
	ftSocket
	ftSymlink
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

type superBlock struct {
	inodes    uint64
	buildTime uint64
	buildNsec uint32
	blocks    uint32
	uuid      [16]byte
	volume    [16]byte
}

// put encodes sb into block 0 (which must be BlockSize long and already hold
// everything else that lives in block 0) and computes the checksum over the
// rest of the block, as the kernel and gVisor verify it.
func (sb *superBlock) put(block0 []byte) {
	b := block0[superOffset : superOffset+superSize]
	clear(b)
	le := binary.LittleEndian
	le.PutUint32(b[0:], superMagic)
	// b[4:8] is the checksum, filled below.
	le.PutUint32(b[8:], featureSBCsum)
	b[12] = blockSizeBits
	b[13] = 0 // sb_extslots
	le.PutUint16(b[14:], rootNid)
	le.PutUint64(b[16:], sb.inodes)
	le.PutUint64(b[24:], sb.buildTime)
	le.PutUint32(b[32:], sb.buildNsec)
	le.PutUint32(b[36:], sb.blocks)
	le.PutUint32(b[40:], 0) // meta_blkaddr
	le.PutUint32(b[44:], 0) // xattr_blkaddr
	copy(b[48:64], sb.uuid[:])
	copy(b[64:80], sb.volume[:])
	// feature_incompat and everything after stay zero: gVisor supports no
	// incompatible feature.
	sum := ^crc32.Update(0, crc32c, block0[superOffset:])
	// crc32.Update applies the standard pre- and post-inversion; the kernel
	// stores the raw register of crc32c(~0, ...), i.e. the complement.
	le.PutUint32(b[4:], sum)
}

type inode struct {
	dataLayout uint16
	mode       uint16
	size       uint64
	u          uint32 // raw block address, or the encoded device number
	ino        uint32
	uid, gid   uint32
	mtime      uint64
	mtimeNsec  uint32
	nlink      uint32
}

func (in *inode) put(b []byte) {
	clear(b[:inodeSize])
	le := binary.LittleEndian
	le.PutUint16(b[0:], layoutExtended|in.dataLayout<<1)
	le.PutUint16(b[2:], 0) // i_xattr_icount: gVisor rejects inodes with xattrs.
	le.PutUint16(b[4:], in.mode)
	le.PutUint64(b[8:], in.size)
	le.PutUint32(b[16:], in.u)
	le.PutUint32(b[20:], in.ino)
	le.PutUint32(b[24:], in.uid)
	le.PutUint32(b[28:], in.gid)
	le.PutUint64(b[32:], in.mtime)
	le.PutUint32(b[40:], in.mtimeNsec)
	le.PutUint32(b[44:], in.nlink)
}

func putDirent(b []byte, nid uint64, nameOff uint16, fileType uint8) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], nid)
	le.PutUint16(b[8:], nameOff)
	b[10] = fileType
	b[11] = 0
}

// encodeDev encodes a device number the way Linux's new_encode_dev does;
// EROFS keeps it in the inode's 32-bit union.
func encodeDev(major, minor uint32) uint32 {
	return minor&0xff | major<<8 | (minor&^0xff)<<12
}
