package blockdev

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
)

// A delta file starts with one header block:
//
//	0x000 magic "GVXDELTA"
//	0x008 version (le32)
//	0x00C block size (le32)
//	0x010 golden size in bytes (le64)
//	0x018 golden ext4 UUID (16 bytes, zero if the golden is not ext4)
//	0x028 golden fingerprint: SHA-256 of its size and first 64 KiB (32 bytes)
//	0x048 offset of the dirty-block bitmap (le64)
//	0x050 offset of block 0's data (le64)
//	0x058 length of the golden path (le16)
//	0x05A golden path (absolute, at most deltaMaxPath bytes)
//	0xFFC crc32c of bytes 0x000-0xFFB (le32)
//
// The bitmap holds one bit per golden block (bit i%8 of byte i/8); block i's
// private copy lives at dataOffset + i*deltaBlockSize. The file is sparse:
// only dirty blocks take space.
const (
	deltaMagic       = "GVXDELTA"
	deltaVersion     = 1
	deltaBlockSize   = 4096
	deltaHeaderSize  = 4096
	deltaMaxPath     = 0xFFC - 0x5A
	fingerprintBytes = 64 << 10
)

// ErrWrongGolden is returned when a delta is opened over a golden image it
// was not made from (different size, UUID or contents), or a golden that was
// written after the delta was made.
var ErrWrongGolden = errors.New("blockdev: delta does not belong to this golden image")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// goldenIdentity is what binds a delta to its golden.
type goldenIdentity struct {
	size        int64
	uuid        [16]byte
	fingerprint [32]byte
}

// identify computes the identity of a golden image. It reads the first
// 64 KiB only, so it costs the same for any image size: with ext4 that span
// holds the superblock and the group descriptors, which change whenever the
// filesystem is mounted or written.
func identify(f *os.File) (goldenIdentity, error) {
	var id goldenIdentity
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return id, fmt.Errorf("blockdev: size of golden %s: %w", f.Name(), err)
	}
	id.size = size
	head := make([]byte, min(size, fingerprintBytes))
	if _, err := f.ReadAt(head, 0); err != nil {
		return id, fmt.Errorf("blockdev: read golden %s: %w", f.Name(), err)
	}
	// The ext4 superblock lives at byte 1024; its magic is at 0x38 and its
	// UUID at 0x68.
	if len(head) >= 2048 && binary.LittleEndian.Uint16(head[1024+0x38:]) == 0xEF53 {
		copy(id.uuid[:], head[1024+0x68:])
	}
	h := sha256.New()
	var sz [8]byte
	binary.LittleEndian.PutUint64(sz[:], uint64(size))
	h.Write(sz[:])
	h.Write(head)
	copy(id.fingerprint[:], h.Sum(nil))
	return id, nil
}

// deltaHeader is the decoded header block.
type deltaHeader struct {
	golden     goldenIdentity
	bitmapOff  int64
	dataOff    int64
	goldenPath string
}

func newDeltaHeader(id goldenIdentity, goldenPath string) (deltaHeader, error) {
	if len(goldenPath) > deltaMaxPath {
		return deltaHeader{}, fmt.Errorf("blockdev: golden path is %d bytes, at most %d fit in a delta header; move the golden to a shorter path", len(goldenPath), deltaMaxPath)
	}
	nblocks := (id.size + deltaBlockSize - 1) / deltaBlockSize
	bitmapBytes := (nblocks + 7) / 8
	bitmapRegion := (bitmapBytes + deltaBlockSize - 1) / deltaBlockSize * deltaBlockSize
	return deltaHeader{
		golden:     id,
		bitmapOff:  deltaHeaderSize,
		dataOff:    deltaHeaderSize + bitmapRegion,
		goldenPath: goldenPath,
	}, nil
}

func (h *deltaHeader) marshal() []byte {
	b := make([]byte, deltaHeaderSize)
	copy(b, deltaMagic)
	le := binary.LittleEndian
	le.PutUint32(b[0x08:], deltaVersion)
	le.PutUint32(b[0x0C:], deltaBlockSize)
	le.PutUint64(b[0x10:], uint64(h.golden.size))
	copy(b[0x18:], h.golden.uuid[:])
	copy(b[0x28:], h.golden.fingerprint[:])
	le.PutUint64(b[0x48:], uint64(h.bitmapOff))
	le.PutUint64(b[0x50:], uint64(h.dataOff))
	le.PutUint16(b[0x58:], uint16(len(h.goldenPath)))
	copy(b[0x5A:], h.goldenPath)
	le.PutUint32(b[0xFFC:], crc32.Checksum(b[:0xFFC], castagnoli))
	return b
}

// isDeltaHeader reports whether b starts like a delta header.
func isDeltaHeader(b []byte) bool {
	return len(b) >= len(deltaMagic) && bytes.Equal(b[:len(deltaMagic)], []byte(deltaMagic))
}

func parseDeltaHeader(b []byte) (deltaHeader, error) {
	var h deltaHeader
	if len(b) < deltaHeaderSize || !isDeltaHeader(b) {
		return h, errors.New("blockdev: not a delta file (bad magic)")
	}
	le := binary.LittleEndian
	if got, want := le.Uint32(b[0xFFC:]), crc32.Checksum(b[:0xFFC], castagnoli); got != want {
		return h, fmt.Errorf("blockdev: delta header checksum is %#x, want %#x: the delta file is damaged", got, want)
	}
	if v := le.Uint32(b[0x08:]); v != deltaVersion {
		return h, fmt.Errorf("blockdev: delta format version %d, this build reads version %d", v, deltaVersion)
	}
	if bs := le.Uint32(b[0x0C:]); bs != deltaBlockSize {
		return h, fmt.Errorf("blockdev: delta block size %d, want %d", bs, deltaBlockSize)
	}
	size := int64(le.Uint64(b[0x10:]))
	if size < 0 {
		return h, errors.New("blockdev: delta header has a negative golden size")
	}
	var id goldenIdentity
	id.size = size
	copy(id.uuid[:], b[0x18:])
	copy(id.fingerprint[:], b[0x28:])
	pathLen := int(le.Uint16(b[0x58:]))
	if pathLen > deltaMaxPath {
		return h, errors.New("blockdev: delta header golden path too long")
	}
	want, err := newDeltaHeader(id, string(b[0x5A:0x5A+pathLen]))
	if err != nil {
		return h, err
	}
	if int64(le.Uint64(b[0x48:])) != want.bitmapOff || int64(le.Uint64(b[0x50:])) != want.dataOff {
		return h, errors.New("blockdev: delta header layout does not match its golden size")
	}
	return want, nil
}
