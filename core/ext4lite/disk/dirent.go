package disk

// Directory entry file types.
const (
	FtUnknown = 0
	FtReg     = 1
	FtDir     = 2
	FtChr     = 3
	FtBlk     = 4
	FtFifo    = 5
	FtSock    = 6
	FtSymlink = 7
	FtMax     = 8

	// DirTailFt marks the checksum tail's fake entry.
	DirTailFt = 0xDE
	// DirTailSize is the size of the checksum tail entry.
	DirTailSize = 12
	// DirEntryHeader is the size of an entry without its name.
	DirEntryHeader = 8
	// MaxNameLen is the longest file name.
	MaxNameLen = 255
)

// FileTypeOfMode maps i_mode's type bits to a directory entry file type.
func FileTypeOfMode(mode uint16) uint8 {
	switch mode & ModeFmt {
	case ModeReg:
		return FtReg
	case ModeDir:
		return FtDir
	case ModeChr:
		return FtChr
	case ModeBlk:
		return FtBlk
	case ModeFifo:
		return FtFifo
	case ModeSock:
		return FtSock
	case ModeLnk:
		return FtSymlink
	}
	return FtUnknown
}

// DirRecLen is the minimum record length of an entry with a name of n bytes.
func DirRecLen(n int) int { return (DirEntryHeader + n + 3) &^ 3 }

// DirEntry is one decoded directory entry. Name aliases the block.
type DirEntry struct {
	Offset   int // within the block
	Inode    uint32
	RecLen   int
	FileType uint8
	Name     []byte
}

// readRecLen decodes rec_len; 64 KiB blocks store a full-block record as
// 65535 (or 0).
func readRecLen(b []byte, off, blockSize int) int {
	v := int(le.Uint16(b[off+4:]))
	if blockSize >= 65536 && (v == 65535 || v == 0) {
		return blockSize
	}
	return v
}

// PutRecLen encodes rec_len.
func PutRecLen(b []byte, off, recLen, blockSize int) {
	if recLen >= 65536 {
		recLen = 65535
	}
	le.PutUint16(b[off+4:], uint16(recLen))
}

// PutDirEntry writes a whole entry at off.
func PutDirEntry(b []byte, off int, ino uint32, recLen int, ft uint8, name []byte) {
	le.PutUint32(b[off:], ino)
	PutRecLen(b, off, recLen, len(b))
	b[off+6] = byte(len(name))
	b[off+7] = ft
	copy(b[off+DirEntryHeader:], name)
}

// SetDirEntryInode changes the inode of the entry at off.
func SetDirEntryInode(b []byte, off int, ino uint32) { le.PutUint32(b[off:], ino) }

// SetDirEntryRecLen changes the record length of the entry at off.
func SetDirEntryRecLen(b []byte, off, recLen int) { PutRecLen(b, off, recLen, len(b)) }

// DirEntryAt decodes the entry at off without validation beyond bounds.
func DirEntryAt(b []byte, off int) (DirEntry, error) {
	if off < 0 || off+DirEntryHeader > len(b) {
		return DirEntry{}, Corruptf("directory entry at offset %d overflows the block", off)
	}
	e := DirEntry{
		Offset:   off,
		Inode:    le.Uint32(b[off:]),
		RecLen:   readRecLen(b, off, len(b)),
		FileType: b[off+7],
	}
	n := int(b[off+6])
	if off+DirEntryHeader+n > len(b) {
		return DirEntry{}, Corruptf("directory entry name at offset %d overflows the block", off)
	}
	e.Name = b[off+DirEntryHeader : off+DirEntryHeader+n]
	return e, nil
}

// WalkDirBlock calls fn for each entry in b[:end] (end is the block size,
// or the offset of the checksum tail), including unused ones (Inode 0),
// until fn returns false. It validates the entry chain the way the kernel's
// ext4_check_dir_entry does; inodes bounds the inode numbers.
func WalkDirBlock(b []byte, end int, inodes uint32, fn func(e DirEntry) bool) error {
	if end > len(b) {
		return Corruptf("directory block end %d beyond its %d bytes", end, len(b))
	}
	bs := len(b)
	for off := 0; off < end; {
		if off+DirEntryHeader > end {
			return Corruptf("directory entry at offset %d overflows the block", off)
		}
		h := b[off : off+DirEntryHeader]
		ino := uint32(h[0]) | uint32(h[1])<<8 | uint32(h[2])<<16 | uint32(h[3])<<24
		recLen := int(h[4]) | int(h[5])<<8
		if bs >= 65536 && (recLen == 65535 || recLen == 0) {
			recLen = bs
		}
		nameLen := int(h[6])
		switch {
		case recLen < 12:
			return Corruptf("directory entry at offset %d: rec_len %d too small", off, recLen)
		case recLen&3 != 0:
			return Corruptf("directory entry at offset %d: rec_len %d not a multiple of 4", off, recLen)
		case recLen < (DirEntryHeader+nameLen+3)&^3:
			return Corruptf("directory entry at offset %d: rec_len %d shorter than name %d", off, recLen, nameLen)
		case off+recLen > end:
			return Corruptf("directory entry at offset %d: rec_len %d crosses the block end %d", off, recLen, end)
		case ino > inodes:
			return Corruptf("directory entry at offset %d: inode %d beyond %d", off, ino, inodes)
		case ino != 0 && nameLen == 0:
			return Corruptf("directory entry at offset %d: empty name", off)
		}
		if !fn(DirEntry{Offset: off, Inode: ino, RecLen: recLen, FileType: h[7], Name: b[off+DirEntryHeader : off+DirEntryHeader+nameLen]}) {
			return nil
		}
		off += recLen
	}
	return nil
}

// HasDirTail reports whether b ends with a checksum tail entry.
func HasDirTail(b []byte) bool {
	if len(b) < DirTailSize {
		return false
	}
	t := b[len(b)-DirTailSize:]
	return le.Uint32(t[0:]) == 0 && le.Uint16(t[4:]) == DirTailSize && t[6] == 0 && t[7] == DirTailFt
}

// DirBlockChecksum computes a leaf block's checksum from the owning inode's
// seed.
func DirBlockChecksum(b []byte, inodeSeed uint32) uint32 {
	return Crc32c(inodeSeed, b[:len(b)-DirTailSize])
}

// PutDirTail writes the checksum tail entry with the block's checksum.
func PutDirTail(b []byte, inodeSeed uint32) {
	t := b[len(b)-DirTailSize:]
	le.PutUint32(t[0:], 0)
	le.PutUint16(t[4:], DirTailSize)
	t[6] = 0
	t[7] = DirTailFt
	le.PutUint32(t[8:], DirBlockChecksum(b, inodeSeed))
}

// VerifyDirTail checks a leaf block's checksum tail.
func VerifyDirTail(b []byte, inodeSeed uint32) error {
	if !HasDirTail(b) {
		return Corruptf("directory block has no checksum tail")
	}
	if got, want := le.Uint32(b[len(b)-4:]), DirBlockChecksum(b, inodeSeed); got != want {
		return Corruptf("directory block checksum %#08x, computed %#08x", got, want)
	}
	return nil
}
