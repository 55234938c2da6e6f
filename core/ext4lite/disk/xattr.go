package disk

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// Extended attribute layout.
const (
	XattrMagic       = 0xEA020000
	XattrHeaderSize  = 32
	xattrEntryHeader = 16
	xattrChecksumOff = 0x10
)

// Attribute name indexes (e_name_index) and the prefixes they stand for.
const (
	XattrIndexNone         = 0
	XattrIndexUser         = 1
	XattrIndexACLAccess    = 2
	XattrIndexACLDefault   = 3
	XattrIndexTrusted      = 4
	XattrIndexLustre       = 5
	XattrIndexSecurity     = 6
	XattrIndexSystem       = 7
	XattrIndexRichACL      = 8
	XattrIndexEncryption   = 9
	XattrIndexHurd         = 10
	ACLAccessName          = "system.posix_acl_access"
	ACLDefaultName         = "system.posix_acl_default"
	xattrPrefixUser        = "user."
	xattrPrefixTrusted     = "trusted."
	xattrPrefixSecurity    = "security."
	xattrPrefixSystem      = "system."
	xattrPrefixSystemRich  = "system.richacl"
	xattrPrefixHurd        = "gnu."
	xattrPrefixLustre      = "lustre."
	xattrPrefixEncryption  = "c"
	inlineDataXattrName    = "data"
	InlineDataXattrIndex   = XattrIndexSystem
	InlineDataXattrNameStr = inlineDataXattrName
)

// Xattr is one extended attribute as stored: Index selects the prefix, Name
// is the rest of the name.
type Xattr struct {
	Index uint8
	Name  string
	Value []byte
}

// FullName returns the attribute's name as user space sees it.
func (x Xattr) FullName() string {
	switch x.Index {
	case XattrIndexUser:
		return xattrPrefixUser + x.Name
	case XattrIndexACLAccess:
		return ACLAccessName + x.Name
	case XattrIndexACLDefault:
		return ACLDefaultName + x.Name
	case XattrIndexTrusted:
		return xattrPrefixTrusted + x.Name
	case XattrIndexLustre:
		return xattrPrefixLustre + x.Name
	case XattrIndexSecurity:
		return xattrPrefixSecurity + x.Name
	case XattrIndexSystem:
		return xattrPrefixSystem + x.Name
	case XattrIndexRichACL:
		return xattrPrefixSystemRich + x.Name
	case XattrIndexHurd:
		return xattrPrefixHurd + x.Name
	}
	return x.Name
}

// SplitXattrName maps a full attribute name to its stored index and suffix,
// as the kernel's ext4 handlers do. It fails with EOPNOTSUPP for namespaces
// ext4 does not store.
func SplitXattrName(full string) (uint8, string, error) {
	switch {
	case full == ACLAccessName:
		return XattrIndexACLAccess, "", nil
	case full == ACLDefaultName:
		return XattrIndexACLDefault, "", nil
	case strings.HasPrefix(full, xattrPrefixUser):
		return XattrIndexUser, full[len(xattrPrefixUser):], nil
	case strings.HasPrefix(full, xattrPrefixTrusted):
		return XattrIndexTrusted, full[len(xattrPrefixTrusted):], nil
	case strings.HasPrefix(full, xattrPrefixSecurity):
		return XattrIndexSecurity, full[len(xattrPrefixSecurity):], nil
	case strings.HasPrefix(full, xattrPrefixHurd):
		return XattrIndexHurd, full[len(xattrPrefixHurd):], nil
	}
	return 0, "", fmt.Errorf("extended attribute %q: namespace not stored by ext4: %w", full, unix.EOPNOTSUPP)
}

// XattrEntrySize is the space an entry with an n-byte name takes.
func XattrEntrySize(n int) int { return (xattrEntryHeader + n + 3) &^ 3 }

// XattrValueSize is the space an n-byte value takes.
func XattrValueSize(n int) int { return (n + 3) &^ 3 }

// XattrHash computes an entry's e_hash.
func XattrHash(name string, value []byte) uint32 {
	var h uint32
	for i := 0; i < len(name); i++ {
		h = h<<5 ^ h>>27 ^ uint32(name[i])
	}
	for i := 0; i < len(value); i += 4 {
		var w [4]byte
		copy(w[:], value[i:])
		h = h<<16 ^ h>>16 ^ le.Uint32(w[:])
	}
	return h
}

// xattrHashSigned is XattrHash with the name bytes taken as signed chars,
// which old kernels and e2fsprogs on signed-char platforms produced.
func xattrHashSigned(name string, value []byte) uint32 {
	var h uint32
	for i := 0; i < len(name); i++ {
		h = h<<5 ^ h>>27 ^ uint32(int32(int8(name[i])))
	}
	for i := 0; i < len(value); i += 4 {
		var w [4]byte
		copy(w[:], value[i:])
		h = h<<16 ^ h>>16 ^ le.Uint32(w[:])
	}
	return h
}

// xattrLess orders entries as the kernel keeps them in blocks: by index,
// then name length, then name.
func xattrLess(a, b Xattr) int {
	if a.Index != b.Index {
		return int(a.Index) - int(b.Index)
	}
	if len(a.Name) != len(b.Name) {
		return len(a.Name) - len(b.Name)
	}
	return strings.Compare(a.Name, b.Name)
}

// SortXattrs sorts entries into block order.
func SortXattrs(xs []Xattr) { slices.SortFunc(xs, xattrLess) }

// parseXattrEntries decodes the entry list at entries[0:] whose values are
// addressed relative to valueBase within region. entriesOff is where the
// list starts in region.
func parseXattrEntries(region []byte, entriesOff, valueBase int) ([]Xattr, error) {
	var xs []Xattr
	var starts []int
	off := entriesOff
	for {
		if off+4 > len(region) {
			return nil, Corruptf("xattr entry list runs off its area")
		}
		if le.Uint32(region[off:]) == 0 {
			break
		}
		if off+xattrEntryHeader > len(region) {
			return nil, Corruptf("xattr entry at %d runs off its area", off)
		}
		nameLen := int(region[off])
		index := region[off+1]
		valueOffs := int(le.Uint16(region[off+2:]))
		valueInum := le.Uint32(region[off+4:])
		valueSize := int(le.Uint32(region[off+8:]))
		next := off + XattrEntrySize(nameLen)
		if nameLen == 0 && index != XattrIndexACLAccess && index != XattrIndexACLDefault {
			return nil, Corruptf("xattr entry at %d has an empty name", off)
		}
		if next+4 > len(region) {
			return nil, Corruptf("xattr entry at %d (name %d bytes) runs off its area", off, nameLen)
		}
		if valueInum != 0 {
			return nil, Corruptf("xattr value stored in inode %d (ea_inode is not supported)", valueInum)
		}
		x := Xattr{Index: index, Name: string(region[off+xattrEntryHeader : off+xattrEntryHeader+nameLen])}
		x.Value = []byte{}
		if valueSize > 0 {
			start := valueBase + valueOffs
			if valueSize > len(region) || start < 0 || start > len(region)-valueSize {
				return nil, Corruptf("xattr %q value (%d bytes at %d) outside its area", x.FullName(), valueSize, valueOffs)
			}
			x.Value = bytes.Clone(region[start : start+valueSize])
			starts = append(starts, start)
		}
		h := le.Uint32(region[off+12:])
		if h != 0 && h != XattrHash(x.Name, x.Value) && h != xattrHashSigned(x.Name, x.Value) {
			return nil, Corruptf("xattr %q hash %#x does not match", x.FullName(), h)
		}
		xs = append(xs, x)
		off = next
	}
	// Values live after the entry list and its terminator.
	for _, start := range starts {
		if start < off+4 {
			return nil, Corruptf("xattr value at %d overlaps the entry list ending at %d", start, off+4)
		}
	}
	return xs, nil
}

// XattrBlockHeader is the header of an external attribute block.
type XattrBlockHeader struct {
	Refcount uint32
	Blocks   uint32
	Hash     uint32
}

// ParseXattrBlock decodes an attribute block. With verify, the checksum is
// checked (blockNr and seed are the block's number and the filesystem
// checksum seed).
func ParseXattrBlock(b []byte, blockNr uint64, seed uint32, verify bool) (XattrBlockHeader, []Xattr, error) {
	var h XattrBlockHeader
	if len(b) < XattrHeaderSize+4 {
		return h, nil, Corruptf("xattr block too small")
	}
	if m := le.Uint32(b[0:]); m != XattrMagic {
		return h, nil, Corruptf("xattr block %d: bad magic %#x", blockNr, m)
	}
	h.Refcount = le.Uint32(b[4:])
	h.Blocks = le.Uint32(b[8:])
	h.Hash = le.Uint32(b[12:])
	if h.Blocks != 1 {
		return h, nil, Corruptf("xattr block %d spans %d blocks", blockNr, h.Blocks)
	}
	if verify {
		if got, want := le.Uint32(b[xattrChecksumOff:]), XattrBlockChecksum(b, blockNr, seed); got != want {
			return h, nil, Corruptf("xattr block %d checksum %#08x, computed %#08x", blockNr, got, want)
		}
	}
	xs, err := parseXattrEntries(b, XattrHeaderSize, 0)
	if err != nil {
		return h, nil, fmt.Errorf("xattr block %d: %w", blockNr, err)
	}
	return h, xs, nil
}

// XattrBlockChecksum computes an attribute block's checksum.
func XattrBlockChecksum(b []byte, blockNr uint64, seed uint32) uint32 {
	var n [8]byte
	le.PutUint64(n[:], blockNr)
	c := Crc32c(seed, n[:])
	c = Crc32c(c, b[:xattrChecksumOff])
	c = Crc32c(c, []byte{0, 0, 0, 0})
	return Crc32c(c, b[xattrChecksumOff+4:])
}

// ParseInodeXattrs decodes the attributes stored inside inode n (after
// i_extra_isize). An inode without the magic has none.
func ParseInodeXattrs(n Inode) ([]Xattr, error) {
	off := n.InlineXattrOffset()
	if off == 0 || le.Uint32(n[off:]) != XattrMagic {
		return nil, nil
	}
	region := n[off+4:]
	return parseXattrEntries(region, 0, 0)
}

// XattrBlockFits reports whether xs fit one attribute block of blockSize.
func XattrBlockFits(xs []Xattr, blockSize int) bool {
	return xattrSpace(xs)+XattrHeaderSize+4 <= blockSize
}

// InodeXattrSpace is the room for in-inode attributes (entries, values and
// the 4-byte terminator) in inode n; 0 if none.
func InodeXattrSpace(n Inode) int {
	off := n.InlineXattrOffset()
	if off == 0 {
		return 0
	}
	return len(n) - off - 4
}

// XattrSpace is the room xs take in an area (entries and values, without
// the terminator).
func XattrSpace(xs []Xattr) int { return xattrSpace(xs) }

func xattrSpace(xs []Xattr) int {
	n := 0
	for _, x := range xs {
		n += XattrEntrySize(len(x.Name)) + XattrValueSize(len(x.Value))
	}
	return n
}

// marshalXattrEntries lays xs out in region: entries from entriesOff,
// values packed from the end; value offsets are relative to valueBase.
func marshalXattrEntries(region []byte, entriesOff, valueBase int, xs []Xattr) {
	clear(region[entriesOff:])
	off := entriesOff
	end := len(region)
	for _, x := range xs {
		e := region[off:]
		e[0] = byte(len(x.Name))
		e[1] = x.Index
		le.PutUint32(e[8:], uint32(len(x.Value)))
		le.PutUint32(e[12:], XattrHash(x.Name, x.Value))
		copy(e[xattrEntryHeader:], x.Name)
		if len(x.Value) > 0 {
			end -= XattrValueSize(len(x.Value))
			copy(region[end:], x.Value)
			le.PutUint16(e[2:], uint16(end-valueBase))
		}
		off += XattrEntrySize(len(x.Name))
	}
}

// MarshalXattrBlock writes an attribute block holding xs (sorted here) with
// the given refcount, and its hash and checksum.
//
// Preconditions: XattrBlockFits(xs, len(b)).
func MarshalXattrBlock(b []byte, blockNr uint64, seed uint32, refcount uint32, xs []Xattr, csum bool) {
	xs = slices.Clone(xs)
	SortXattrs(xs)
	clear(b)
	le.PutUint32(b[0:], XattrMagic)
	le.PutUint32(b[4:], refcount)
	le.PutUint32(b[8:], 1)
	marshalXattrEntries(b, XattrHeaderSize, 0, xs)
	var h uint32
	for _, x := range xs {
		eh := XattrHash(x.Name, x.Value)
		h = h<<16 ^ h>>16 ^ eh
	}
	le.PutUint32(b[12:], h)
	SetXattrBlockRefcount(b, blockNr, seed, refcount, csum)
}

// SetXattrBlockRefcount rewrites a block's reference count (and checksum).
func SetXattrBlockRefcount(b []byte, blockNr uint64, seed uint32, refcount uint32, csum bool) {
	le.PutUint32(b[4:], refcount)
	if csum {
		le.PutUint32(b[xattrChecksumOff:], XattrBlockChecksum(b, blockNr, seed))
	}
}

// MarshalInodeXattrs writes xs into inode n's attribute area, or clears
// the area if xs is empty.
//
// Preconditions: XattrSpace(xs) <= InodeXattrSpace(n).
func MarshalInodeXattrs(n Inode, xs []Xattr) {
	off := n.InlineXattrOffset()
	if off == 0 {
		return
	}
	clear(n[off:])
	if len(xs) == 0 {
		return
	}
	le.PutUint32(n[off:], XattrMagic)
	marshalXattrEntries(n[off+4:], 0, 0, xs)
}
