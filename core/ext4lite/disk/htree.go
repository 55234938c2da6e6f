package disk

// Hashed (htree) directory index layout.
const (
	dxRootInfoOffset = 0x18 // after "." (12 bytes) and ".." header (12)
	dxEntrySize      = 8
	dxTailSize       = 8
	dxCountLimitSize = 4
	// MaxDxLevels is the deepest index the largedir feature allows.
	MaxDxLevels = 3
)

// DxBlock is a decoded htree index block (the root in directory block 0, or
// an interior node).
type DxBlock struct {
	Levels      int      // indirect levels below the root; only for the root
	CountOffset int      // where the count/limit pair lives
	Limit       int      // capacity in entries
	Children    []uint32 // logical directory blocks, in hash order
}

// ParseDxRoot decodes the index in directory block 0 of an indexed
// directory.
func ParseDxRoot(b []byte) (*DxBlock, error) {
	if len(b) < dxRootInfoOffset+8+dxCountLimitSize {
		return nil, Corruptf("htree root block too small")
	}
	dot, err := DirEntryAt(b, 0)
	if err != nil || string(dot.Name) != "." || dot.RecLen != DirRecLen(1) {
		return nil, Corruptf("htree root: bad '.' entry")
	}
	dotdot, err := DirEntryAt(b, dot.RecLen)
	if err != nil || string(dotdot.Name) != ".." || dot.RecLen+dotdot.RecLen != len(b) {
		return nil, Corruptf("htree root: bad '..' entry")
	}
	info := b[dxRootInfoOffset:]
	infoLen := int(info[5])
	levels := int(info[6])
	if le.Uint32(info[0:]) != 0 || infoLen != 8 {
		return nil, Corruptf("htree root: bad info block (length %d)", infoLen)
	}
	if levels >= MaxDxLevels {
		return nil, Corruptf("htree root: %d indirect levels", levels)
	}
	d, err := parseDxEntries(b, dxRootInfoOffset+infoLen)
	if err != nil {
		return nil, err
	}
	d.Levels = levels
	return d, nil
}

// ParseDxNode decodes an interior htree node block.
func ParseDxNode(b []byte) (*DxBlock, error) {
	if len(b) < DirEntryHeader+dxCountLimitSize {
		return nil, Corruptf("htree node block too small")
	}
	if le.Uint32(b[0:]) != 0 || readRecLen(b, 0, len(b)) != len(b) {
		return nil, Corruptf("htree node: bad fake directory entry")
	}
	return parseDxEntries(b, DirEntryHeader)
}

func parseDxEntries(b []byte, countOffset int) (*DxBlock, error) {
	limit := int(le.Uint16(b[countOffset:]))
	count := int(le.Uint16(b[countOffset+2:]))
	if count == 0 || count > limit || countOffset+limit*dxEntrySize > len(b) {
		return nil, Corruptf("htree index holds %d of %d entries", count, limit)
	}
	d := &DxBlock{CountOffset: countOffset, Limit: limit}
	// The first entry's hash field is the count/limit pair; its block
	// follows.
	for i := range count {
		d.Children = append(d.Children, le.Uint32(b[countOffset+i*dxEntrySize+4:]))
	}
	return d, nil
}

// DxChecksum computes an index block's checksum.
func DxChecksum(b []byte, d *DxBlock, count int, inodeSeed uint32) (uint32, bool) {
	tail := d.CountOffset + d.Limit*dxEntrySize
	if tail+dxTailSize > len(b) {
		return 0, false
	}
	c := Crc32c(inodeSeed, b[:d.CountOffset+count*dxEntrySize])
	c = Crc32c(c, b[tail:tail+4])
	c = Crc32c(c, []byte{0, 0, 0, 0})
	return c, true
}

// VerifyDx checks an index block's checksum.
func VerifyDx(b []byte, d *DxBlock, inodeSeed uint32) error {
	c, ok := DxChecksum(b, d, len(d.Children), inodeSeed)
	if !ok {
		return Corruptf("htree index block has no room for its checksum")
	}
	tail := d.CountOffset + d.Limit*dxEntrySize
	if got := le.Uint32(b[tail+4:]); got != c {
		return Corruptf("htree index checksum %#08x, computed %#08x", got, c)
	}
	return nil
}
