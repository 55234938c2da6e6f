package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"z.gfire.dev/gvx/internal/battery"
)

// bigDirEntries is how many names the large directory holds: enough, with
// 1 KiB blocks, for its htree to have a level of index nodes.
const bigDirEntries = 2000

// baseVolumes are the real ext4 images, made by mke2fs, that the cases
// damage copies of.
type baseVolumes struct {
	csum    string // mke2fs's ext4 defaults, 1 KiB blocks: metadata_csum on
	plain   string // the same without metadata_csum, so damage meets the structure checks, not a checksum
	journal string // csum with two transactions (a descriptor, a revoke) to replay
	jcsum   string // plain with checksummed (v3) transactions to replay
}

// makeBaseVolumes makes the images: files, directories (one with a
// two-level htree), a fast and a slow symlink, in-inode and block xattrs,
// a sparse file whose extent tree has depth 1, and a journal.
func makeBaseVolumes(t *testing.T, dir string) baseVolumes {
	t.Helper()
	src := filepath.Join(dir, "src")
	for _, d := range []string{"dir/sub", "big"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dir/file", "hello\n")
	write("dir/sub/f", "sub\n")
	write("xa", "xattrs\n")
	for i := range bigDirEntries {
		write(bigDirName(i), "")
	}
	if err := os.Symlink("dir/file", filepath.Join(src, "fast")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(strings.Repeat("./", 40)+"dir/file", filepath.Join(src, "slow")); err != nil {
		t.Fatal(err)
	}
	// 40 runs of data apart: 40 extents, more than the inode holds.
	f, err := os.Create(filepath.Join(src, "frag"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := f.WriteAt([]byte(strings.Repeat(strconv.Itoa(i), 100)), int64(i)*65536); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	big := filepath.Join(dir, "xattr-value")
	if err := os.WriteFile(big, []byte(strings.Repeat("v", 600)), 0o644); err != nil {
		t.Fatal(err)
	}

	b := baseVolumes{csum: filepath.Join(dir, "csum.ext4"), plain: filepath.Join(dir, "plain.ext4"), journal: filepath.Join(dir, "journal.ext4"), jcsum: filepath.Join(dir, "jcsum.ext4")}
	if err := os.WriteFile(b.csum, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(b.csum, 32<<20); err != nil {
		t.Fatal(err)
	}
	onHost(t, "mke2fs", "-q", "-t", "ext4", "-b", "1024", "-I", "256", "-F", "-d", src, b.csum)
	debugfsRun(t, b.csum, true, "ea_set /xa user.small v", "ea_set -f "+big+" /xa user.big")
	// e2fsck -D indexes the directories mke2fs -d left linear.
	if out, err := exec.Command("e2fsck", "-fyD", b.csum).CombinedOutput(); exitCode(err) > 1 {
		t.Fatalf("e2fsck -fyD: %v\n%s", err, out)
	}
	if out := debugfsRun(t, b.csum, false, "htree /big"); !strings.Contains(out, "Indirect levels: 1") {
		t.Fatalf("/big's htree has no index level:\n%s", truncate(out, 2000))
	}
	if out := debugfsRun(t, b.csum, false, "stat /frag"); !strings.Contains(out, "(ETB0)") {
		t.Fatalf("/frag's extent tree has depth 0:\n%s", out)
	}
	if out := debugfsRun(t, b.csum, false, "stat /xa"); regexp.MustCompile(`File ACL: 0\b`).MatchString(out) {
		t.Fatalf("/xa has no xattr block:\n%s", out)
	}
	copySparse(t, b.csum, b.plain)
	onHost(t, "tune2fs", "-O", "^metadata_csum", b.plain)
	for _, j := range []struct {
		img, base, open string
	}{{b.journal, b.csum, "jo"}, {b.jcsum, b.plain, "jo -c"}} {
		copySparse(t, j.base, j.img)
		// The last block is free: the replay writes it.
		last := debugfsNumber(t, j.img, "stats", `Block count:\s+(\d+)`) - 1
		data := filepath.Join(dir, "journal-data")
		if err := os.WriteFile(data, []byte(strings.Repeat("J", 1024)), 0o644); err != nil {
			t.Fatal(err)
		}
		debugfsRun(t, j.img, true, j.open, fmt.Sprintf("jw -b %d %s", last, data), fmt.Sprintf("jw -r %d", last-1), "jc")
		if out := debugfsRun(t, j.img, false, "logdump"); !strings.Contains(out, "descriptor block") || !strings.Contains(out, "revoke table") {
			t.Fatalf("the journal of %s holds no transactions:\n%s", j.img, out)
		}
	}
	return b
}

func bigDirName(i int) string {
	return fmt.Sprintf("big/name-with-a-long-tail-to-fill-directory-blocks-%04d", i)
}

// onHost runs a host command that must succeed.
func onHost(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

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

// TestBatteryCorruptVolumes gives rungv volumes with each metadata
// structure damaged, read-write and read-only: each is refused at mount
// with an error that names the volume, the problem and what to do, or the
// guest gets I/O errors for the damaged part, which rungv explains, and
// the rest works. The cheap pass runs a random third of the cases
// read-write; the full one, every case both ways.
func TestBatteryCorruptVolumes(t *testing.T) {
	for _, tool := range []string{"mke2fs", "debugfs", "dumpe2fs", "e2fsck", "tune2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			battery.Skip(t, tool+" is not installed (apt-get install e2fsprogs)")
		}
	}
	img := testImage(t)
	dir := t.TempDir()
	bases := makeBaseVolumes(t, dir)
	seed := battery.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	modes := []string{""}
	if battery.Full() {
		modes = append(modes, ",readonly")
	}
	var ty tally
	for i, c := range volumeCases() {
		if !battery.Full() && rng.IntN(3) != 0 && !c.mustReport {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("case-%d.ext4", i))
			defer os.Remove(path)
			copySparse(t, c.base(bases), path)
			c.damage(t, &vol{path: path, bs: 1024})
			if c.mustReport {
				if clean, out := e2fsckClean(path); clean {
					t.Fatalf("e2fsck -fn finds the damaged volume clean:\n%s", out)
				}
			}
			damaged, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range modes {
				if err := os.WriteFile(path, damaged, 0o644); err != nil {
					t.Fatal(err)
				}
				r := runBounded(t, "run", "-q", "--mount", "type=volume,src="+path+",dst=/v"+mode, img, "sh", "-c", guestScript)
				o, detail := volumeOutcome(r, path)
				if c.mustReport && o == outAccepted {
					o, detail = outUnclear, "SILENT CORRUPTION: the guest read the damaged file without an error: "+detail
				}
				if c.mustReport && o == outClear && (!strings.Contains(r.stderr, "inode ") || !strings.Contains(r.stderr, "e2fsck -fy")) {
					o, detail = outUnclear, "the report names no inode or does not say to run e2fsck -fy: "+detail
				}
				ty.record(t, c.name+mode, o, r.took, detail)
			}
		})
	}
	ty.table(t, "Corrupt ext4 volumes (each metadata structure, each unsupported feature)")
}

// exoticScript writes a small tree, removes a name and reads it back.
const exoticScript = `echo GUEST-RAN
mkdir /v/d && echo hello > /v/d/f && ln -s f /v/d/l && ln /v/d/f /v/d/hard || exit 1
i=0; while [ $i -lt 300 ]; do echo $i > /v/d/n$i || exit 1; i=$((i+1)); done
rm /v/d/n1 && sync && cat /v/d/l && ls /v/d | wc -l`

// exoticVolume is a valid ext4 volume made with unusual mke2fs options.
type exoticVolume struct {
	name    string
	mkfs    []string                   // mke2fs options after -t ext4
	size    int64                      // bytes; 64 MiB if 0
	after   func(t *testing.T, v *vol) // changes mke2fs cannot make
	feature string                     // what a refusal must name
}

func exoticVolumes() []exoticVolume {
	return []exoticVolume{
		{name: "1 KiB blocks", mkfs: []string{"-b", "1024"}},
		{name: "2 KiB blocks", mkfs: []string{"-b", "2048"}},
		{name: "4 KiB blocks", mkfs: []string{"-b", "4096"}},
		{name: "64 KiB blocks", mkfs: []string{"-b", "65536"}, size: 256 << 20, feature: "block"},
		{name: "128-byte inodes", mkfs: []string{"-I", "128"}},
		{name: "256-byte inodes", mkfs: []string{"-I", "256"}},
		{name: "1024-byte inodes", mkfs: []string{"-I", "1024"}},
		{name: "no journal", mkfs: []string{"-O", "^has_journal"}},
		{name: "no extents (block-mapped)", mkfs: []string{"-O", "^extent,^64bit"}, feature: "extent"},
		{name: "no dir_index", mkfs: []string{"-O", "^dir_index"}},
		{name: "no metadata_csum", mkfs: []string{"-O", "^metadata_csum"}},
		{name: "no metadata_csum, uninit_bg", mkfs: []string{"-O", "^metadata_csum,uninit_bg"}},
		{name: "no 64bit", mkfs: []string{"-O", "^64bit"}},
		{name: "meta_bg", mkfs: []string{"-O", "meta_bg,^resize_inode"}, feature: "meta_bg"},
		{name: "inline_data", mkfs: []string{"-O", "inline_data"}, feature: "inline_data"},
		{name: "bigalloc", mkfs: []string{"-O", "bigalloc", "-C", "16384"}, feature: "bigalloc"},
		{name: "casefold", mkfs: []string{"-O", "casefold"}, feature: "casefold"},
		{name: "encrypt", mkfs: []string{"-O", "encrypt"}, feature: "encrypt"},
		{name: "quota", mkfs: []string{"-O", "quota"}, feature: "quota"},
		{name: "project", mkfs: []string{"-O", "quota,project"}, feature: "quota"},
		{name: "large_dir", mkfs: []string{"-O", "large_dir"}},
		{name: "ea_inode", mkfs: []string{"-O", "ea_inode"}, feature: "ea_inode"},
		{name: "no huge_file", mkfs: []string{"-O", "^huge_file"}},
		{name: "no flex_bg", mkfs: []string{"-O", "^flex_bg"}},
		{name: "mmp", mkfs: []string{"-O", "mmp"}, feature: "mmp"},
		{name: "verity", mkfs: []string{"-O", "verity"}, feature: "verity"},
		{name: "sparse_super2", mkfs: []string{"-O", "sparse_super2"}},
		{name: "orphan_file", mkfs: []string{"-O", "orphan_file"}, feature: "orphan_file"},
		{name: "ext2", mkfs: []string{"-O", "^has_journal,^extent,^flex_bg,^huge_file,^dir_nlink,^extra_isize,^metadata_csum,^64bit"}, feature: "extent"},
		{name: "external journal", mkfs: []string{"-O", "^has_journal"}, feature: "journal", after: func(t *testing.T, v *vol) {
			// mke2fs adds an external journal only on a block device;
			// this is the superblock it writes.
			v.debugfs(t, "feature has_journal", "ssv journal_inum 0", "ssv journal_dev 0x801", "ssv journal_uuid 01234567-89ab-cdef-0123-456789abcdef")
		}},
	}
}

// TestBatteryExoticVolumes gives rungv valid volumes made with unusual
// mke2fs options: each works (the guest writes, and e2fsck -fn finds the
// volume clean after) or is refused at once with an error that names the
// feature and says how to make a volume that works. The cheap pass runs a
// random quarter of them.
func TestBatteryExoticVolumes(t *testing.T) {
	for _, tool := range []string{"mke2fs", "debugfs", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			battery.Skip(t, tool+" is not installed (apt-get install e2fsprogs)")
		}
	}
	img := testImage(t)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(battery.Seed(t), 1))
	var ty tally
	for i, e := range exoticVolumes() {
		if !battery.Full() && rng.IntN(4) != 0 {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("exotic-%d.ext4", i))
			defer os.Remove(path)
			size := e.size
			if size == 0 {
				size = 64 << 20
			}
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, size); err != nil {
				t.Fatal(err)
			}
			onHost(t, "mke2fs", append(append([]string{"-q", "-F", "-t", "ext4"}, e.mkfs...), path)...)
			if e.after != nil {
				e.after(t, &vol{path: path})
			}
			r := runBounded(t, "run", "-q", "--mount", "type=volume,src="+path+",dst=/v", img, "sh", "-c", exoticScript)
			o, detail := exoticOutcome(r, path, e.feature)
			ty.record(t, e.name, o, r.took, detail)
		})
	}
	ty.table(t, "Exotic but valid ext4 volumes (mke2fs options)")
}

// exoticOutcome classifies a run of exoticScript on the valid volume vol:
// it worked and left vol clean, or it was refused naming feature and how
// to make a volume that works.
func exoticOutcome(r runResult, vol, feature string) (string, string) {
	if o, bad := crashed(r); bad {
		return o, fmt.Sprintf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
	mine := rungvLines(r.stderr)
	if !strings.Contains(r.stdout, "GUEST-RAN") {
		if r.code != 0 && feature != "" && strings.Contains(mine, feature) && clearRefusal(mine, vol, "mke2fs", "rungv volume create", "tune2fs", "read-only") {
			return outClear, "refused: " + mine
		}
		return outUnclear, fmt.Sprintf("exit %d, stderr %q", r.code, r.stderr)
	}
	if want := "hello\n302\n"; r.code != 0 || !strings.HasSuffix(r.stdout, want) {
		return outUnclear, fmt.Sprintf("the guest's writes failed: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if clean, out := e2fsckClean(vol); !clean {
		return outUnclear, "SILENT DAMAGE: e2fsck -fn after the guest wrote:\n" + out
	}
	return outAccepted, "written, e2fsck -fn clean"
}
