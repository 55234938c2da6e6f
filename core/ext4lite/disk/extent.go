package disk

// Extent tree constants.
const (
	ExtentMagic        = 0xF30A
	ExtentHeaderSize   = 12
	ExtentEntrySize    = 12
	ExtentTailSize     = 4
	MaxInitExtentLen   = 32768
	MaxUninitExtentLen = 32767
	MaxExtentDepth     = 5
	// MaxLogicalBlock is one past the last logical block an extent can map.
	MaxLogicalBlock = 1 << 32
)

// Extent is one leaf entry: Len blocks starting at logical block Logical are
// stored at physical block Physical. Uninit extents are allocated but read
// as zeros (fallocate's unwritten extents).
type Extent struct {
	Logical  uint32
	Len      uint32
	Physical uint64
	Uninit   bool
}

// End is one past the last logical block of the extent.
func (e Extent) End() uint64 { return uint64(e.Logical) + uint64(e.Len) }

// ExtentIndex is one index entry: the subtree at block Child maps logical
// blocks from Logical on.
type ExtentIndex struct {
	Logical uint32
	Child   uint64
}

// ExtentNode is a decoded extent tree node.
type ExtentNode struct {
	Depth   uint16
	Max     uint16
	Leaves  []Extent      // when Depth == 0
	Indexes []ExtentIndex // when Depth > 0
}

// ExtentNodeCapacity returns how many entries fit a node of size bytes
// (60 for the root in i_block, a block otherwise, leaving room for the
// checksum tail).
func ExtentNodeCapacity(size int, inInode bool) int {
	if inInode {
		return (size - ExtentHeaderSize) / ExtentEntrySize
	}
	return (size - ExtentHeaderSize - ExtentTailSize) / ExtentEntrySize
}

// ParseExtentNode decodes a node from b (i_block or a whole tree block).
func ParseExtentNode(b []byte) (*ExtentNode, error) {
	if len(b) < ExtentHeaderSize {
		return nil, Corruptf("extent node is %d bytes", len(b))
	}
	if m := le.Uint16(b[0:]); m != ExtentMagic {
		return nil, Corruptf("bad extent header magic %#x", m)
	}
	entries := int(le.Uint16(b[2:]))
	n := &ExtentNode{Max: le.Uint16(b[4:]), Depth: le.Uint16(b[6:])}
	if n.Depth > MaxExtentDepth {
		return nil, Corruptf("extent tree depth %d", n.Depth)
	}
	if int(n.Max) > (len(b)-ExtentHeaderSize)/ExtentEntrySize || entries > int(n.Max) {
		return nil, Corruptf("extent node holds %d of %d entries in %d bytes", entries, n.Max, len(b))
	}
	var prevEnd uint64
	for i := range entries {
		e := b[ExtentHeaderSize+i*ExtentEntrySize:]
		logical := le.Uint32(e[0:])
		if i > 0 && uint64(logical) < prevEnd {
			return nil, Corruptf("extent entries out of order at logical block %d", logical)
		}
		if n.Depth == 0 {
			l := uint32(le.Uint16(e[4:]))
			x := Extent{Logical: logical, Len: l, Physical: uint64(le.Uint16(e[6:]))<<32 | uint64(le.Uint32(e[8:]))}
			if l > MaxInitExtentLen {
				x.Len, x.Uninit = l-MaxInitExtentLen, true
			}
			if x.Len == 0 || x.End() > MaxLogicalBlock {
				return nil, Corruptf("extent at logical block %d has length %d", logical, l)
			}
			n.Leaves = append(n.Leaves, x)
			prevEnd = x.End()
			continue
		}
		n.Indexes = append(n.Indexes, ExtentIndex{Logical: logical, Child: uint64(le.Uint32(e[4:])) | uint64(le.Uint16(e[8:]))<<32})
		prevEnd = uint64(logical) + 1
	}
	return n, nil
}

// MarshalExtentNode encodes a node into b, which must be the node's full
// size; max is the entry capacity to record. The tail checksum is not set.
func MarshalExtentNode(b []byte, n *ExtentNode) {
	clear(b)
	le.PutUint16(b[0:], ExtentMagic)
	entries := len(n.Leaves)
	if n.Depth > 0 {
		entries = len(n.Indexes)
	}
	le.PutUint16(b[2:], uint16(entries))
	le.PutUint16(b[4:], n.Max)
	le.PutUint16(b[6:], n.Depth)
	for i, x := range n.Leaves {
		e := b[ExtentHeaderSize+i*ExtentEntrySize:]
		le.PutUint32(e[0:], x.Logical)
		l := x.Len
		if x.Uninit {
			l += MaxInitExtentLen
		}
		le.PutUint16(e[4:], uint16(l))
		le.PutUint16(e[6:], uint16(x.Physical>>32))
		le.PutUint32(e[8:], uint32(x.Physical))
	}
	for i, x := range n.Indexes {
		e := b[ExtentHeaderSize+i*ExtentEntrySize:]
		le.PutUint32(e[0:], x.Logical)
		le.PutUint32(e[4:], uint32(x.Child))
		le.PutUint16(e[8:], uint16(x.Child>>32))
	}
}

// extentTailOffset is where a tree block's checksum lives.
func extentTailOffset(b []byte) int {
	return ExtentHeaderSize + ExtentEntrySize*int(le.Uint16(b[4:]))
}

// ExtentBlockChecksum computes a tree block's checksum; inodeSeed is the
// owning inode's checksum seed (see InodeCsumSeed).
func ExtentBlockChecksum(b []byte, inodeSeed uint32) uint32 {
	return Crc32c(inodeSeed, b[:extentTailOffset(b)])
}

// VerifyExtentBlock checks a tree block's checksum.
func VerifyExtentBlock(b []byte, inodeSeed uint32) error {
	off := extentTailOffset(b)
	if off+ExtentTailSize > len(b) {
		return Corruptf("extent block capacity overflows the block")
	}
	if got, want := le.Uint32(b[off:]), ExtentBlockChecksum(b, inodeSeed); got != want {
		return Corruptf("extent block checksum %#08x, computed %#08x", got, want)
	}
	return nil
}

// SetExtentBlockChecksum stores a tree block's checksum.
func SetExtentBlockChecksum(b []byte, inodeSeed uint32) {
	le.PutUint32(b[extentTailOffset(b):], ExtentBlockChecksum(b, inodeSeed))
}

// InodeCsumSeed is the per-inode checksum seed: crc32c of the inode number
// and generation, continuing from the filesystem seed.
func InodeCsumSeed(fsSeed, ino, generation uint32) uint32 {
	var b [4]byte
	le.PutUint32(b[:], ino)
	c := Crc32c(fsSeed, b[:])
	le.PutUint32(b[:], generation)
	return Crc32c(c, b[:])
}
