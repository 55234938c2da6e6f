package disk

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// watchdog crashes the fuzz worker, with stacks, if an input runs for 10s,
// so the fuzzer keeps the input. Use as defer watchdog()().
func watchdog() func() {
	t := time.AfterFunc(10*time.Second, func() {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		panic(fmt.Sprintf("fuzz input ran for 10s:\n%s", buf[:n]))
	})
	return func() { t.Stop() }
}

// Every parser must turn arbitrary bytes into a value or an error, never a
// panic; what parses must survive a marshal/parse round trip.

// seedSuperblock is a valid superblock of a 1 GiB mkfs.ext4 filesystem.
func seedSuperblock() []byte {
	var sb Superblock
	le.PutUint32(sb[0x0:], 65536)
	sb.SetBlocksCountRaw(262144)
	sb.SetRBlocksCountRaw(13107)
	le.PutUint32(sb[0x18:], 2)
	le.PutUint32(sb[0x1C:], 2)
	le.PutUint32(sb[0x20:], 32768)
	le.PutUint32(sb[0x24:], 32768)
	le.PutUint32(sb[0x28:], 8192)
	le.PutUint16(sb[0x38:], SuperMagic)
	le.PutUint32(sb[0x4C:], RevDynamic)
	le.PutUint32(sb[0x54:], 11)
	le.PutUint16(sb[0x58:], 256)
	le.PutUint32(sb[0x5C:], CompatHasJournal|CompatExtAttr|CompatResizeInode|CompatDirIndex)
	le.PutUint32(sb[0x60:], IncompatFiletype|IncompatExtents|Incompat64Bit|IncompatFlexBG)
	le.PutUint32(sb[0x64:], RoCompatSparseSuper|RoCompatLargeFile|RoCompatHugeFile|RoCompatDirNlink|RoCompatExtraIsize|RoCompatMetadataCsum)
	le.PutUint16(sb[0xCE:], 127)
	le.PutUint32(sb[0xE0:], 8)
	le.PutUint16(sb[0xFE:], 64)
	le.PutUint16(sb[0x15C:], 32)
	le.PutUint16(sb[0x15E:], 32)
	sb[0x174] = 4
	sb[0x175] = 1
	sb.UpdateChecksum()
	return sb[:]
}

// seedInode is a regular file inode with an extent and in-inode xattrs.
func seedInode() []byte {
	n := Inode(make([]byte, 256))
	n.SetExtraIsize(32)
	n.SetMode(ModeReg | 0o644)
	n.SetLinks(1)
	n.SetSize(5000)
	n.SetFlags(FlagExtents)
	MarshalExtentNode(n.IBlock(), &ExtentNode{Max: 4, Leaves: []Extent{{Logical: 0, Len: 2, Physical: 100}}})
	MarshalInodeXattrs(n, []Xattr{{Index: XattrIndexUser, Name: "a", Value: []byte("b")}, {Index: XattrIndexACLAccess, Value: []byte{1, 0, 0, 0}}})
	n.UpdateChecksum(7, 12)
	return n
}

// seedDirBlock is a 1 KiB leaf directory block with a checksum tail.
func seedDirBlock() []byte {
	b := make([]byte, 1024)
	PutDirEntry(b, 0, 2, 12, FtDir, []byte("."))
	PutDirEntry(b, 12, 2, 20, FtDir, []byte(".."))
	PutDirEntry(b, 32, 12, 1024-32-DirTailSize, FtReg, []byte("file"))
	PutDirTail(b, 3)
	return b
}

// seedDxRoot is a 1 KiB htree root block.
func seedDxRoot() []byte {
	b := make([]byte, 1024)
	PutDirEntry(b, 0, 2, 12, FtDir, []byte("."))
	PutDirEntry(b, 12, 2, 1024-12, FtDir, []byte(".."))
	b[dxRootInfoOffset+5] = 8
	le.PutUint16(b[0x20:], 100) // limit
	le.PutUint16(b[0x22:], 2)   // count
	le.PutUint32(b[0x24:], 1)
	le.PutUint32(b[0x28:], 0x80000000)
	le.PutUint32(b[0x2C:], 2)
	return b
}

// seedXattrBlock is a 1 KiB attribute block.
func seedXattrBlock() []byte {
	b := make([]byte, 1024)
	MarshalXattrBlock(b, 99, 5, 2, []Xattr{
		{Index: XattrIndexTrusted, Name: "overlay.opaque", Value: []byte("y")},
		{Index: XattrIndexSecurity, Name: "selinux", Value: make([]byte, 300)},
	}, true)
	return b
}

// seedExtentLeaf is a 1 KiB extent tree leaf.
func seedExtentLeaf() []byte {
	b := make([]byte, 1024)
	node := &ExtentNode{Max: uint16(ExtentNodeCapacity(1024, false))}
	for i := range 10 {
		node.Leaves = append(node.Leaves, Extent{Logical: uint32(i * 10), Len: 5, Physical: uint64(1000 + i*20), Uninit: i%3 == 0})
	}
	MarshalExtentNode(b, node)
	SetExtentBlockChecksum(b, 7)
	return b
}

func FuzzSuperblock(f *testing.F) {
	f.Add(make([]byte, SuperblockSize))
	f.Add(seedSuperblock())
	f.Fuzz(func(t *testing.T, b []byte) {
		defer watchdog()()
		sb, err := ParseSuperblock(b)
		if err != nil {
			return
		}
		_ = sb.Describe()
		_ = sb.GroupCount()
		_ = sb.CsumSeed()
		_ = FeatureString("incompat", sb.FeatureIncompat())
		_ = sb.JnlBlocks()
	})
}

func FuzzInode(f *testing.F) {
	f.Add(make([]byte, 256))
	f.Add(seedInode())
	f.Fuzz(func(t *testing.T, b []byte) {
		defer watchdog()()
		// Inode sizes are powers of two from 128 (the superblock
		// guarantees it).
		size := GoodOldInodeSize
		for size*2 <= len(b) && size < 1024 {
			size *= 2
		}
		if len(b) < size {
			return
		}
		n := Inode(b[:size])
		if err := CheckInode(n, 12); err != nil {
			return
		}
		_, _ = n.Rdev()
		_ = n.Atime()
		_ = n.Crtime()
		_ = n.Sectors(4096)
		_ = n.VerifyChecksum(1, 12)
		if xs, err := ParseInodeXattrs(n); err == nil && XattrSpace(xs) <= InodeXattrSpace(n) {
			c := Inode(bytes.Clone(b))
			MarshalInodeXattrs(c, xs)
			back, err := ParseInodeXattrs(c)
			if err != nil || len(back) != len(xs) {
				t.Fatalf("in-inode xattrs do not round-trip: %v", err)
			}
		}
		if node, err := ParseExtentNode(n.IBlock()); err == nil {
			_ = node
		}
	})
}

func FuzzExtentNode(f *testing.F) {
	f.Add(make([]byte, 60))
	f.Add(seedExtentLeaf())
	f.Add([]byte(Inode(seedInode()).IBlock()))
	f.Fuzz(func(t *testing.T, b []byte) {
		defer watchdog()()
		node, err := ParseExtentNode(b)
		if err != nil {
			return
		}
		out := make([]byte, len(b))
		MarshalExtentNode(out, node)
		back, err := ParseExtentNode(out)
		if err != nil {
			t.Fatalf("marshalled node does not parse: %v", err)
		}
		if len(back.Leaves) != len(node.Leaves) || len(back.Indexes) != len(node.Indexes) {
			t.Fatal("extent node does not round-trip")
		}
		for i := range node.Leaves {
			if back.Leaves[i] != node.Leaves[i] {
				t.Fatalf("extent %d: %+v became %+v", i, node.Leaves[i], back.Leaves[i])
			}
		}
		if len(b) >= ExtentHeaderSize+ExtentEntrySize*int(node.Max)+ExtentTailSize {
			_ = VerifyExtentBlock(b, 7)
		}
	})
}

func FuzzDirBlock(f *testing.F) {
	f.Add(make([]byte, 1024))
	f.Add(seedDirBlock())
	f.Add(seedDxRoot())
	f.Fuzz(func(t *testing.T, b []byte) {
		defer watchdog()()
		for _, end := range []int{len(b), len(b) - DirTailSize} {
			if end < 0 {
				continue
			}
			_ = WalkDirBlock(b, end, 1<<20, func(e DirEntry) bool {
				if e.Offset+e.RecLen > end || len(e.Name) > MaxNameLen {
					t.Fatalf("entry %+v escapes the block", e)
				}
				return true
			})
		}
		if HasDirTail(b) {
			_ = VerifyDirTail(b, 3)
		}
		if d, err := ParseDxRoot(b); err == nil {
			_ = VerifyDx(b, d, 3)
		}
		if d, err := ParseDxNode(b); err == nil {
			_ = VerifyDx(b, d, 3)
		}
	})
}

func FuzzXattrBlock(f *testing.F) {
	f.Add(make([]byte, 1024))
	f.Add(seedXattrBlock())
	f.Fuzz(func(t *testing.T, b []byte) {
		defer watchdog()()
		_, xs, err := ParseXattrBlock(b, 99, 5, false)
		if err != nil || !XattrBlockFits(xs, len(b)) {
			return
		}
		out := make([]byte, len(b))
		MarshalXattrBlock(out, 99, 5, 1, xs, true)
		_, back, err := ParseXattrBlock(out, 99, 5, true)
		if err != nil || len(back) != len(xs) {
			t.Fatalf("xattr block does not round-trip: %v", err)
		}
	})
}
