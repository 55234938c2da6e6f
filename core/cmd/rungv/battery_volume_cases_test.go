package main

// The corrupt-volume battery's cases: each ext4 structure or feature broken.

import (
	"fmt"
	"testing"
)

// volumeCases are the damaged volumes. Superblock and inode fields are set
// with debugfs, which keeps their checksums right, so the structure checks
// meet them; raw damage to blocks goes to the image without checksums
// unless a case is about a checksum.
func volumeCases() []volCase {
	c := func(name string, base func(baseVolumes) string, damage func(*testing.T, *vol)) volCase {
		return volCase{name: name, base: base, damage: damage}
	}
	// r is a case whose damage Linux's block_validity and i_size checks
	// refuse: a map into metadata or past the end, a size no file has.
	r := func(name string, base func(baseVolumes) string, damage func(*testing.T, *vol)) volCase {
		return volCase{name: name, base: base, damage: damage, mustReport: true}
	}
	cases := []volCase{
		// The superblock.
		c("sb magic", csumBase, func(t *testing.T, v *vol) { patch(t, v.path, 1024+sbMagic, le16(0x1234)) }),
		c("sb checksum", csumBase, func(t *testing.T, v *vol) { patch(t, v.path, 1024+sbChecksum, le32(0x1234)) }),
		c("sb log_block_size 2 (4 KiB on a 1 KiB volume)", csumBase, ssv("log_block_size", 2)),
		c("sb log_block_size 20", csumBase, ssv("log_block_size", 20)),
		c("sb inodes_per_group 0", csumBase, ssv("inodes_per_group", 0)),
		c("sb inodes_per_group 7", csumBase, ssv("inodes_per_group", 7)),
		c("sb inodes_per_group huge", csumBase, ssv("inodes_per_group", 99999999)),
		c("sb blocks_per_group 0", csumBase, ssv("blocks_per_group", 0)),
		c("sb blocks_per_group huge", csumBase, ssv("blocks_per_group", 1<<30)),
		c("sb inodes_count 1", csumBase, ssv("inodes_count", 1)),
		c("sb blocks_count beyond the device", csumBase, ssv("blocks_count", int64(1)<<40)),
		c("sb blocks_count 10", csumBase, ssv("blocks_count", 10)),
		c("sb free_blocks_count huge", csumBase, ssv("free_blocks_count", int64(1)<<40)),
		c("sb free_inodes_count huge", csumBase, ssv("free_inodes_count", 99999999)),
		c("sb first_data_block 0 on a 1 KiB volume", csumBase, ssv("first_data_block", 0)),
		c("sb first_data_block 5", csumBase, ssv("first_data_block", 5)),
		c("sb rev_level 7", csumBase, ssv("rev_level", 7)),
		c("sb inode_size 100", csumBase, ssv("inode_size", 100)),
		c("sb inode_size 2048 (over the block size)", csumBase, ssv("inode_size", 2048)),
		c("sb first_ino 1", csumBase, ssv("first_ino", 1)),
		c("sb desc_size 7", csumBase, ssv("desc_size", 7)),
		c("sb last_orphan beyond the inodes", csumBase, ssv("last_orphan", 99999999)),
		c("sb s_state error", csumBase, ssv("state", 2)),
		// The group descriptors.
		c("gd block_bitmap beyond the device", csumBase, func(t *testing.T, v *vol) { v.debugfs(t, "set_bg 0 block_bitmap 99999999") }),
		c("gd inode_bitmap beyond the device", csumBase, func(t *testing.T, v *vol) { v.debugfs(t, "set_bg 0 inode_bitmap 99999999") }),
		c("gd inode_table beyond the device", csumBase, func(t *testing.T, v *vol) { v.debugfs(t, "set_bg 0 inode_table 99999999") }),
		c("gd inode_table on the superblock", csumBase, func(t *testing.T, v *vol) { v.debugfs(t, "set_bg 0 inode_table 1") }),
		c("gd block_bitmap on the inode table", csumBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("set_bg 0 block_bitmap %d", v.group0(t, "Inode table")))
		}),
		c("gd checksum", csumBase, func(t *testing.T, v *vol) { v.debugfs(t, "set_bg 0 checksum 0x1234") }),
		c("gd free_blocks_count huge", csumBase, func(t *testing.T, v *vol) { v.debugfs(t, "set_bg 0 free_blocks_count 60000") }),
		c("gd itable_unused over the group", csumBase, func(t *testing.T, v *vol) { v.debugfs(t, "set_bg 0 itable_unused 60000") }),
		c("gd group 0 inode table marked uninitialised", csumBase, func(t *testing.T, v *vol) { v.debugfs(t, "set_bg 0 flags 1") }),
		// The bitmaps: without checksums, all free or all used.
		c("block bitmap all free", plainBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("zap_block -p 0 %d", v.group0(t, "Block bitmap")))
		}),
		c("block bitmap all used", plainBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("zap_block -p 0xff %d", v.group0(t, "Block bitmap")))
		}),
		c("inode bitmap all free", plainBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("zap_block -p 0 %d", v.group0(t, "Inode bitmap")))
		}),
		c("block bitmap checksum", csumBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("zap_block -o 0 -l 1 -p 0x55 %d", v.group0(t, "Block bitmap")))
		}),
		c("inode bitmap checksum", csumBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("zap_block -o 100 -l 1 -p 0x55 %d", v.group0(t, "Inode bitmap")))
		}),
		// The inode table: the root.
		c("root mode regular file", csumBase, sif("<2>", "mode", "0100644")),
		c("root mode 0", csumBase, sif("<2>", "mode", 0)),
		c("root size 0", csumBase, sif("<2>", "size", 0)),
		c("root size huge", csumBase, sif("<2>", "size", int64(1)<<40)),
		c("root flags without extents", csumBase, sif("<2>", "flags", 0)),
		c("root flags inline data", csumBase, sif("<2>", "flags", "0x10080000")),
		c("root links_count 0", csumBase, sif("<2>", "links_count", 0)),
		c("root extent magic", csumBase, sif("<2>", "block[0]", "0x1234")),
		c("root inode checksum", csumBase, sif("<2>", "checksum", "0x1234")),
		// Extent trees: /frag's root (depth 1, 1 of 4 entries) and
		// /dir/file's one extent.
		c("extent header magic", csumBase, sif("/frag", "block[0]", "0x0001f30b")),
		c("extent entries over max", csumBase, sif("/frag", "block[0]", "0x0005f30a")),
		c("extent max over the inode", csumBase, sif("/frag", "block[1]", "0x00010010")),
		c("extent depth 5", csumBase, sif("/frag", "block[1]", "0x00050004")),
		c("extent depth 0 over an index", csumBase, sif("/frag", "block[1]", "0x00000004")),
		c("extent index beyond the device", csumBase, sif("/frag", "block[4]", 99999999)),
		r("extent beyond the device", csumBase, sif("/dir/file", "block[5]", 99999999)),
		r("extent one past the end", csumBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("sif /dir/file block[5] %d", debugfsNumber(t, v.path, "stats", `Block count:\s+(\d+)`)))
		}),
		r("extent on the superblock", csumBase, sif("/dir/file", "block[5]", 1)),
		r("extent on the group descriptors", csumBase, sif("/dir/file", "block[5]", 2)),
		r("extent on the inode table", csumBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("sif /dir/file block[5] %d", v.group0(t, "Inode table")))
		}),
		r("extent on the block bitmap", csumBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("sif /dir/file block[5] %d", v.group0(t, "Block bitmap")))
		}),
		r("extent on the journal", csumBase, func(t *testing.T, v *vol) {
			v.debugfs(t, fmt.Sprintf("sif /dir/file block[5] %d", v.block(t, "<8>", 5)))
		}),
		c("extent length 0", csumBase, sif("/dir/file", "block[4]", 0)),
		c("extent leaf block magic", plainBase, inBlock("/frag", -1, 0, le16(0x1234))),
		c("extent leaf block entries over max", plainBase, inBlock("/frag", -1, 2, le16(0xffff))),
		c("extent leaf block checksum", csumBase, inBlock("/frag", -1, 12, le32(0xdeadbeef))),
		c("extent tree loop", plainBase, func(t *testing.T, v *vol) {
			// The root says depth 2, and its one child, the leaf, now an
			// index of depth 1, points at itself.
			leaf := debugfsNumber(t, v.path, "stat /frag", `\(ETB0\):(\d+)`)
			v.debugfs(t, "sif /frag block[1] 0x00020004")
			v.patch(t, leaf, 0, append(append(le16(0xf30a), le16(1)...), append(le16(84), le16(1)...)...))
			v.patch(t, leaf, 12, append(le32(0), le32(uint32(leaf))...))
			v.patch(t, leaf, 20, le16(0))
		}),
		c("file size huge", csumBase, sif("/dir/file", "size", int64(1)<<40)),
		r("file size negative (2^63)", csumBase, sif("/dir/file", "size", "0x8000000000000000")),
		r("file size past what extents map", csumBase, sif("/dir/file", "size", int64(1)<<42)),
		c("file inode checksum", csumBase, sif("/dir/file", "checksum", "0x1234")),
		c("file extra_isize over the inode", csumBase, sif("/xa", "extra_isize", 300)),
		// Directory blocks: /dir is linear; "." at 0, ".." at 12.
		c("dirent rec_len 0", plainBase, inBlock("/dir", 0, 12+4, le16(0))),
		c("dirent rec_len misaligned", plainBase, inBlock("/dir", 0, 12+4, le16(13))),
		c("dirent rec_len past the block", plainBase, inBlock("/dir", 0, 12+4, le16(2000))),
		c("dirent name_len over rec_len", plainBase, inBlock("/dir", 0, 6, []byte{200})),
		c("dirent inode beyond the inodes", plainBase, inBlock("/dir", 0, 24, le32(99999999))),
		c("dir block checksum", csumBase, inBlock("/dir", 0, 24+8, []byte("X"))),
		// The htree of /big: its root is block 0; dx_root_info at 24,
		// limit and count at 32, entry 0's block at 36.
		c("htree hash version", plainBase, inBlock("/big", 0, 28, []byte{0x77})),
		c("htree info length", plainBase, inBlock("/big", 0, 29, []byte{9})),
		c("htree indirect levels 5", plainBase, inBlock("/big", 0, 30, []byte{5})),
		c("htree levels 0 over an index", plainBase, inBlock("/big", 0, 30, []byte{0})),
		c("dx root limit 0", plainBase, inBlock("/big", 0, 32, le16(0))),
		c("dx root limit over the block", plainBase, inBlock("/big", 0, 32, le16(500))),
		c("dx root count 0", plainBase, inBlock("/big", 0, 34, le16(0))),
		c("dx root count over limit", plainBase, inBlock("/big", 0, 34, le16(0xffff))),
		c("dx root block beyond the directory", plainBase, inBlock("/big", 0, 36, le32(0xffffff))),
		c("dx root points at itself", plainBase, inBlock("/big", 0, 36, le32(0))),
		c("dx node count over limit", plainBase, dxNode(10, le16(0xffff))),
		c("dx node limit 0", plainBase, dxNode(8, le16(0))),
		c("dx node points at the root", plainBase, dxNode(12, le32(0))),
		c("dx node checksum", csumBase, dxNode(16, le32(0xdeadbeef))),
		// The journal: its superblock (block 0) and, replayed at mount,
		// a descriptor (1), a commit (3) and a revoke block (4).
		c("jsb magic", journalBase, inJournal(0, 0, 0x1234)),
		c("jsb blocksize 4096", journalBase, inJournal(0, 12, 4096)),
		c("jsb maxlen over the journal", journalBase, inJournal(0, 16, 99999999)),
		c("jsb maxlen 1", journalBase, inJournal(0, 16, 1)),
		c("jsb first 0", journalBase, inJournal(0, 20, 0)),
		c("jsb first past maxlen", journalBase, inJournal(0, 20, 99999999)),
		c("jsb start past maxlen", journalBase, inJournal(0, 28, 99999999)),
		c("journal descriptor tag beyond the device", journalBase, inJournal(1, 12, 99999999)),
		c("journal descriptor tag on the superblock", journalBase, inJournal(1, 12, 1)),
		c("journal descriptor no last tag", journalBase, inJournal(1, 12+4, 0)),
		c("journal descriptor magic", journalBase, inJournal(1, 0, 0x1234)),
		c("journal revoke count huge", journalBase, inJournal(4, 12, 0xffffffff)),
		c("journal revoke count under the header", journalBase, inJournal(4, 12, 4)),
		c("journal revoke record beyond the device", journalBase, inJournal(4, 16, 99999999)),
		c("journal commit checksum", jcsumBase, inJournal(3, 16, 0xdeadbeef)),
		c("journal descriptor tag checksum", jcsumBase, inJournal(1, 12+12, 0xdeadbeef)),
		c("journal inode beyond the device", csumBase, sif("<8>", "block[5]", 99999999)),
		c("journal inode not a file", csumBase, sif("<8>", "mode", "040755")),
		// The xattr block of /xa: header, then entries at 32.
		c("xattr block magic", plainBase, inXattrBlock(0, le32(0x1234))),
		c("xattr block h_blocks 2", plainBase, inXattrBlock(8, le32(2))),
		c("xattr value offset past the block", plainBase, inXattrBlock(32+2, le16(0xfff0))),
		c("xattr value size huge", plainBase, inXattrBlock(32+8, le32(0xffffff))),
		c("xattr name_len 255", plainBase, inXattrBlock(32, []byte{255})),
		c("xattr block checksum", csumBase, inXattrBlock(16, le32(0xdeadbeef))),
		c("xattr block beyond the device", csumBase, sif("/xa", "file_acl", 99999999)),
		// Symlinks: /fast lives in the inode, /slow in a block.
		c("fast symlink size 0", csumBase, sif("/fast", "size", 0)),
		c("fast symlink size 61", csumBase, sif("/fast", "size", 61)),
		c("slow symlink size over its block", csumBase, sif("/slow", "size", 5000)),
		c("slow symlink size 0", csumBase, sif("/slow", "size", 0)),
		c("slow symlink size huge", csumBase, sif("/slow", "size", int64(1)<<40)),
		// The orphan list.
		c("orphan list loop", csumBase, func(t *testing.T, v *vol) {
			ino := v.ino(t, "/dir/sub/f")
			v.debugfs(t, fmt.Sprintf("ssv last_orphan %d", ino), fmt.Sprintf("sif <%d> dtime %d", ino, ino))
		}),
		c("orphan list two-inode loop", csumBase, func(t *testing.T, v *vol) {
			a, b := v.ino(t, "/dir/sub/f"), v.ino(t, "/dir/file")
			v.debugfs(t, fmt.Sprintf("ssv last_orphan %d", a), fmt.Sprintf("sif <%d> dtime %d", a, b), fmt.Sprintf("sif <%d> dtime %d", b, a))
		}),
	}
	// Every feature bit ext4lite does not support, on a volume that
	// otherwise is sound.
	for _, f := range []struct {
		word string
		off  int64
		bit  uint32
		name string
	}{
		{"feature_incompat", sbFeatureIncompat, 0x1, "compression"},
		{"feature_incompat", sbFeatureIncompat, 0x8, "journal_dev"},
		{"feature_incompat", sbFeatureIncompat, 0x10, "meta_bg"},
		{"feature_incompat", sbFeatureIncompat, 0x100, "mmp"},
		{"feature_incompat", sbFeatureIncompat, 0x400, "ea_inode"},
		{"feature_incompat", sbFeatureIncompat, 0x1000, "dirdata"},
		{"feature_incompat", sbFeatureIncompat, 0x8000, "inline_data"},
		{"feature_incompat", sbFeatureIncompat, 0x10000, "encrypt"},
		{"feature_incompat", sbFeatureIncompat, 0x20000, "casefold"},
		{"feature_incompat", sbFeatureIncompat, 0x80000000, "unknown incompat bit 31"},
		{"feature_ro_compat", sbFeatureRoCompat, 0x100, "quota"},
		{"feature_ro_compat", sbFeatureRoCompat, 0x200, "bigalloc"},
		{"feature_ro_compat", sbFeatureRoCompat, 0x1000, "replica"},
		{"feature_ro_compat", sbFeatureRoCompat, 0x2000, "project"},
		{"feature_ro_compat", sbFeatureRoCompat, 0x8000, "verity"},
		{"feature_ro_compat", sbFeatureRoCompat, 0x10000, "orphan_present"},
		{"feature_ro_compat", sbFeatureRoCompat, 0x80000000, "unknown ro_compat bit 31"},
		{"feature_compat", sbFeatureCompat, 0x400, "fast_commit"},
		{"feature_compat", sbFeatureCompat, 0x1000, "orphan_file"},
		{"feature_compat", sbFeatureCompat, 0x80000000, "unknown compat bit 31"},
	} {
		cases = append(cases, c("feature "+f.name, csumBase, setFeature(f.word, f.off, f.bit)))
	}
	return cases
}
