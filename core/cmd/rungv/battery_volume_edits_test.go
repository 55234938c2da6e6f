package main

// The volume battery's edits of an ext4 image, and the vol type they act on.

import (
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// volCase damages a copy of a base volume.
type volCase struct {
	name   string
	base   func(baseVolumes) string
	damage func(t *testing.T, v *vol)
	// mustReport: e2fsck calls the damaged volume corrupt and the guest
	// reads the damaged file, so reading it without an error (accepted)
	// is silent corruption. Such cases run in every pass.
	mustReport bool
}

// vol is a copy of a base volume being damaged; its methods find each
// structure with debugfs and dumpe2fs.
type vol struct {
	path string
	bs   int64
}

func (v *vol) debugfs(t *testing.T, requests ...string) {
	t.Helper()
	debugfsRun(t, v.path, true, requests...)
}

// block returns the physical block of logical block lblk of the file (a
// path or <ino>).
func (v *vol) block(t *testing.T, file string, lblk int) int64 {
	t.Helper()
	return debugfsNumber(t, v.path, fmt.Sprintf("bmap %s %d", file, lblk), `(?m)^(\d+)\s*$`)
}

// ino returns path's inode number.
func (v *vol) ino(t *testing.T, path string) int64 {
	t.Helper()
	return debugfsNumber(t, v.path, "stat "+path, `Inode: (\d+)`)
}

// group0 returns a location dumpe2fs gives for group 0 ("Block bitmap at").
func (v *vol) group0(t *testing.T, what string) int64 {
	t.Helper()
	out := onHost(t, "dumpe2fs", v.path)
	m := regexp.MustCompile(what + ` at (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dumpe2fs: no %q", what)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// patch writes b at off in block blk.
func (v *vol) patch(t *testing.T, blk, off int64, b []byte) {
	t.Helper()
	patch(t, v.path, blk*v.bs+off, b)
}

// superU32 reads a little-endian field of the primary superblock.
func (v *vol) superU32(t *testing.T, off int64) uint32 {
	t.Helper()
	f, err := os.Open(v.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [4]byte
	if _, err := f.ReadAt(b[:], 1024+off); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[:])
}

// Offsets of ext4's on-disk formats (not of any image's structures).
const (
	sbFeatureCompat   = 0x5c
	sbFeatureIncompat = 0x60
	sbFeatureRoCompat = 0x64
	sbMagic           = 0x38
	sbChecksum        = 0x3fc
)

func ssv(field string, value any) func(*testing.T, *vol) {
	return func(t *testing.T, v *vol) { v.debugfs(t, fmt.Sprintf("ssv %s %v", field, value)) }
}

func sif(file, field string, value any) func(*testing.T, *vol) {
	return func(t *testing.T, v *vol) { v.debugfs(t, fmt.Sprintf("sif %s %s %v", file, field, value)) }
}

// setFeature sets bit in the feature word at off, leaving the others.
func setFeature(field string, off int64, bit uint32) func(*testing.T, *vol) {
	return func(t *testing.T, v *vol) {
		v.debugfs(t, fmt.Sprintf("ssv %s 0x%x", field, v.superU32(t, off)|bit))
	}
}

// inBlock patches bytes at off in logical block lblk of file.
func inBlock(file string, lblk int, off int64, b []byte) func(*testing.T, *vol) {
	return func(t *testing.T, v *vol) {
		if lblk < 0 {
			v.patch(t, debugfsNumber(t, v.path, "stat "+file, `\(ETB0\):(\d+)`), off, b)
			return
		}
		v.patch(t, v.block(t, file, lblk), off, b)
	}
}

// inJournal patches bytes at off in logical block lblk of the journal
// (inode 8), big-endian as jbd2 is.
func inJournal(lblk int, off int64, value uint32) func(*testing.T, *vol) {
	return func(t *testing.T, v *vol) {
		v.patch(t, v.block(t, "<8>", lblk), off, binary.BigEndian.AppendUint32(nil, value))
	}
}

// inXattrBlock patches bytes at off in /xa's xattr block.
func inXattrBlock(off int64, b []byte) func(*testing.T, *vol) {
	return func(t *testing.T, v *vol) {
		v.patch(t, debugfsNumber(t, v.path, "stat /xa", `File ACL: (\d+)`), off, b)
	}
}

func csumBase(b baseVolumes) string    { return b.csum }
func plainBase(b baseVolumes) string   { return b.plain }
func journalBase(b baseVolumes) string { return b.journal }
func jcsumBase(b baseVolumes) string   { return b.jcsum }

// dxNode patches /big's first htree index node, which entry 0 of the root
// names: a fake dirent (8 bytes), then limit, count and entries.
func dxNode(off int64, b []byte) func(*testing.T, *vol) {
	return func(t *testing.T, v *vol) {
		root := v.block(t, "/big", 0)
		f, err := os.Open(v.path)
		if err != nil {
			t.Fatal(err)
		}
		var e [4]byte
		_, err = f.ReadAt(e[:], root*v.bs+36)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		v.patch(t, v.block(t, "/big", int(binary.LittleEndian.Uint32(e[:]))), off, b)
	}
}
