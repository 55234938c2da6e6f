// Package jbd2 reads and writes the JBD2 journal that ext4 keeps its
// metadata transactions in, following the kernel's
// Documentation/filesystems/ext4/journal.rst: recovery (scan, revoke and
// replay passes, with checksum v1/v2/v3, 32/64-bit tags, escaping and
// revoke records) and a writer for ordered-mode transactions with
// checksum v3.
//
// All journal fields are big-endian. The journal is accessed through Log,
// which maps journal-relative block numbers to storage.
package jbd2

import (
	"encoding/binary"
	"fmt"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

var be = binary.BigEndian

// Block types and magic.
const (
	Magic           = 0xC03B3998
	BlockDescriptor = 1
	BlockCommit     = 2
	BlockSuperV1    = 3
	BlockSuperV2    = 4
	BlockRevoke     = 5
	BlockFastCommit = 6
)

// Features.
const (
	CompatChecksum      = 0x1
	IncompatRevoke      = 0x1
	Incompat64Bit       = 0x2
	IncompatAsyncCommit = 0x4
	IncompatCsumV2      = 0x8
	IncompatCsumV3      = 0x10
	IncompatFastCommit  = 0x20
	knownIncompat       = IncompatRevoke | Incompat64Bit | IncompatAsyncCommit | IncompatCsumV2 | IncompatCsumV3 | IncompatFastCommit
)

// Tag flags.
const (
	FlagEscape   = 1
	FlagSameUUID = 2
	FlagDeleted  = 4
	FlagLastTag  = 8
)

// Checksum types in the superblock and v1 commit blocks.
const (
	ChecksumCrc32  = 1
	ChecksumCrc32c = 4
)

const (
	headerSize          = 12
	tailSize            = 4
	revokeHeaderSize    = 16
	uuidSize            = 16
	superblockSize      = 1024
	defaultFastCommits  = 256
	commitChecksumOff   = 0x10
	commitSecOff        = 0x30
	commitNsecOff       = 0x38
	commitChksumTypeOff = 0xC
	commitChksumSizeOff = 0xD
	maxUsers            = 48
)

// Superblock field offsets.
const (
	jsBlockSize    = 0x0C
	jsMaxLen       = 0x10
	jsFirst        = 0x14
	jsSequence     = 0x18
	jsStart        = 0x1C
	jsErrno        = 0x20
	jsCompat       = 0x24
	jsIncompat     = 0x28
	jsRoCompat     = 0x2C
	jsUUID         = 0x30
	jsNrUsers      = 0x40
	jsMaxTrans     = 0x48
	jsChecksumType = 0x50
	jsNumFCBlocks  = 0x54
	jsChecksum     = 0xFC
)

// Superblock is the raw journal superblock (the first 1024 bytes of journal
// block 0).
type Superblock [superblockSize]byte

func (s *Superblock) u32(off int) uint32      { return be.Uint32(s[off:]) }
func (s *Superblock) put32(off int, v uint32) { be.PutUint32(s[off:], v) }

// BlockType is the header block type (v1 or v2 superblock).
func (s *Superblock) BlockType() uint32 { return s.u32(4) }

// BlockSize is s_blocksize.
func (s *Superblock) BlockSize() uint32 { return s.u32(jsBlockSize) }

// MaxLen is s_maxlen, the journal length in blocks.
func (s *Superblock) MaxLen() uint32 { return s.u32(jsMaxLen) }

// First is s_first, the first log block.
func (s *Superblock) First() uint32 { return s.u32(jsFirst) }

// Sequence is s_sequence, the first transaction ID expected in the log.
func (s *Superblock) Sequence() uint32 { return s.u32(jsSequence) }

// SetSequence sets s_sequence.
func (s *Superblock) SetSequence(v uint32) { s.put32(jsSequence, v) }

// Start is s_start, the log block of the first transaction, 0 if the
// journal is empty.
func (s *Superblock) Start() uint32 { return s.u32(jsStart) }

// SetStart sets s_start.
func (s *Superblock) SetStart(v uint32) { s.put32(jsStart, v) }

// Errno is s_errno.
func (s *Superblock) Errno() int32 { return int32(s.u32(jsErrno)) }

// Compat is the compatible feature set (v2 only).
func (s *Superblock) Compat() uint32 { return s.v2(jsCompat) }

// Incompat is the incompatible feature set (v2 only).
func (s *Superblock) Incompat() uint32 { return s.v2(jsIncompat) }

// SetIncompat sets the incompatible feature set.
func (s *Superblock) SetIncompat(v uint32) { s.put32(jsIncompat, v) }

// RoCompat is the read-only compatible feature set (v2 only).
func (s *Superblock) RoCompat() uint32 { return s.v2(jsRoCompat) }

func (s *Superblock) v2(off int) uint32 {
	if s.BlockType() != BlockSuperV2 {
		return 0
	}
	return s.u32(off)
}

// UUID is the journal UUID.
func (s *Superblock) UUID() [16]byte { return [16]byte(s[jsUUID : jsUUID+16]) }

// HasCsumV2or3 reports whether the journal uses block checksums.
func (s *Superblock) HasCsumV2or3() bool { return s.Incompat()&(IncompatCsumV2|IncompatCsumV3) != 0 }

// CsumSeed is the seed of all v2/v3 checksums: crc32c of the UUID.
func (s *Superblock) CsumSeed() uint32 {
	u := s.UUID()
	return disk.Crc32c(^uint32(0), u[:])
}

// ComputeChecksum returns the superblock checksum.
func (s *Superblock) ComputeChecksum() uint32 {
	c := disk.Crc32c(^uint32(0), s[:jsChecksum])
	c = disk.Crc32c(c, []byte{0, 0, 0, 0})
	return disk.Crc32c(c, s[jsChecksum+4:])
}

// UpdateChecksum stores the checksum if the journal uses them.
func (s *Superblock) UpdateChecksum() {
	if s.HasCsumV2or3() {
		s.put32(jsChecksum, s.ComputeChecksum())
	}
}

// Last is one past the last log block usable for transactions (fast commit
// blocks sit at the end of the journal).
func (s *Superblock) Last() uint32 {
	last := s.MaxLen()
	if s.Incompat()&IncompatFastCommit != 0 {
		fc := s.u32(jsNumFCBlocks)
		if fc == 0 {
			fc = defaultFastCommits
		}
		if fc < last {
			last -= fc
		}
	}
	return last
}

// TagBytes is the size of a descriptor tag, without the UUID that follows
// tags lacking FlagSameUUID.
func (s *Superblock) TagBytes() int {
	inc := s.Incompat()
	if inc&IncompatCsumV3 != 0 {
		return 16
	}
	sz := 12
	if inc&IncompatCsumV2 != 0 {
		sz += 2
	}
	if inc&Incompat64Bit != 0 {
		return sz
	}
	return sz - 4
}

// ParseSuperblock decodes and validates a journal superblock. blockSize is
// the filesystem block size, journalBlocks the journal inode's length.
func ParseSuperblock(b []byte, blockSize int, journalBlocks uint64) (*Superblock, error) {
	if len(b) < superblockSize {
		return nil, disk.Corruptf("journal superblock truncated")
	}
	s := new(Superblock)
	copy(s[:], b)
	if be.Uint32(s[0:]) != Magic {
		return nil, disk.Corruptf("bad journal superblock magic %#x", be.Uint32(s[0:]))
	}
	if t := s.BlockType(); t != BlockSuperV1 && t != BlockSuperV2 {
		return nil, disk.Corruptf("journal superblock has block type %d", t)
	}
	if int(s.BlockSize()) != blockSize {
		return nil, disk.Corruptf("journal block size %d, filesystem block size %d", s.BlockSize(), blockSize)
	}
	if uint64(s.MaxLen()) > journalBlocks || s.MaxLen() < 2 {
		return nil, disk.Corruptf("journal length %d, journal inode holds %d blocks", s.MaxLen(), journalBlocks)
	}
	if s.First() == 0 || s.First() >= s.Last() {
		return nil, disk.Corruptf("journal first block %d of %d", s.First(), s.Last())
	}
	if s.Start() != 0 && (s.Start() < s.First() || s.Start() >= s.Last()) {
		return nil, disk.Corruptf("journal start block %d outside %d..%d", s.Start(), s.First(), s.Last())
	}
	if unknown := s.Incompat() &^ knownIncompat; unknown != 0 {
		return nil, fmt.Errorf("journal has unknown incompatible features %#x: refusing to replay or write it", unknown)
	}
	if s.Incompat()&IncompatCsumV2 != 0 && s.Incompat()&IncompatCsumV3 != 0 {
		return nil, disk.Corruptf("journal claims both checksum v2 and v3")
	}
	if s.HasCsumV2or3() {
		if s[jsChecksumType] != ChecksumCrc32c {
			return nil, disk.Corruptf("journal checksum type %d", s[jsChecksumType])
		}
		if got, want := s.u32(jsChecksum), s.ComputeChecksum(); got != want {
			return nil, disk.Corruptf("journal superblock checksum %#08x, computed %#08x", got, want)
		}
	}
	if s.BlockType() == BlockSuperV2 && s.u32(jsNrUsers) > maxUsers {
		return nil, disk.Corruptf("journal has %d users", s.u32(jsNrUsers))
	}
	return s, nil
}

// NewSuperblock returns the superblock of a fresh, empty internal journal of
// maxLen blocks, the way mke2fs writes it: v2, no features, sequence 1.
func NewSuperblock(blockSize int, maxLen uint32, uuid [16]byte) *Superblock {
	s := new(Superblock)
	be.PutUint32(s[0:], Magic)
	be.PutUint32(s[4:], BlockSuperV2)
	s.put32(jsBlockSize, uint32(blockSize))
	s.put32(jsMaxLen, maxLen)
	s.put32(jsFirst, 1)
	s.put32(jsSequence, 1)
	copy(s[jsUUID:], uuid[:])
	s.put32(jsNrUsers, 1)
	return s
}

// header is a decoded block header.
type header struct {
	blockType uint32
	sequence  uint32
}

func parseHeader(b []byte) (header, bool) {
	if be.Uint32(b[0:]) != Magic {
		return header{}, false
	}
	return header{blockType: be.Uint32(b[4:]), sequence: be.Uint32(b[8:])}, true
}

func putHeader(b []byte, blockType, sequence uint32) {
	be.PutUint32(b[0:], Magic)
	be.PutUint32(b[4:], blockType)
	be.PutUint32(b[8:], sequence)
}

// blockTailCsum computes the checksum of a descriptor or revoke block (the
// last 4 bytes hold it and count as zero).
func blockTailCsum(b []byte, seed uint32) uint32 {
	c := disk.Crc32c(seed, b[:len(b)-tailSize])
	return disk.Crc32c(c, []byte{0, 0, 0, 0})
}

// commitCsum computes a v2/v3 commit block checksum.
func commitCsum(b []byte, seed uint32) uint32 {
	c := disk.Crc32c(seed, b[:commitChecksumOff])
	c = disk.Crc32c(c, []byte{0, 0, 0, 0})
	return disk.Crc32c(c, b[commitChecksumOff+4:])
}

// tagCsum computes a block tag checksum for data in transaction sequence.
func tagCsum(seed, sequence uint32, data []byte) uint32 {
	var s [4]byte
	be.PutUint32(s[:], sequence)
	return disk.Crc32c(disk.Crc32c(seed, s[:]), data)
}

// tag is a decoded descriptor tag.
type tag struct {
	block    uint64
	flags    uint32
	checksum uint32
}

func (s *Superblock) parseTag(b []byte) tag {
	if s.Incompat()&IncompatCsumV3 != 0 {
		t := tag{block: uint64(be.Uint32(b[0:])), flags: be.Uint32(b[4:]), checksum: be.Uint32(b[12:])}
		if s.Incompat()&Incompat64Bit != 0 {
			t.block |= uint64(be.Uint32(b[8:])) << 32
		}
		return t
	}
	t := tag{block: uint64(be.Uint32(b[0:])), checksum: uint32(be.Uint16(b[4:])), flags: uint32(be.Uint16(b[6:]))}
	if s.Incompat()&Incompat64Bit != 0 {
		t.block |= uint64(be.Uint32(b[8:])) << 32
	}
	return t
}

func (s *Superblock) putTag(b []byte, t tag) {
	if s.Incompat()&IncompatCsumV3 != 0 {
		be.PutUint32(b[0:], uint32(t.block))
		be.PutUint32(b[4:], t.flags)
		be.PutUint32(b[8:], uint32(t.block>>32))
		be.PutUint32(b[12:], t.checksum)
		return
	}
	be.PutUint32(b[0:], uint32(t.block))
	be.PutUint16(b[4:], uint16(t.checksum))
	be.PutUint16(b[6:], uint16(t.flags))
	if s.Incompat()&Incompat64Bit != 0 {
		be.PutUint32(b[8:], uint32(t.block>>32))
	}
}

// Log is the journal's storage, addressed by journal-relative block number.
type Log interface {
	// ReadBlock reads block n into p (one block).
	ReadBlock(n uint32, p []byte) error
	// WriteBlock writes p, len(p)/blocksize consecutive blocks, from
	// block n on.
	WriteBlock(n uint32, p []byte) error
}

// tidGT reports whether transaction ID a comes after b (IDs wrap).
func tidGT(a, b uint32) bool { return int32(a-b) > 0 }
