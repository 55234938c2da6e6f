package ext4lite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBlockValidity damages a file made by mkfs.ext4 and debugfs so that
// its extent points into metadata or past the end, or its i_size is one no
// file can have. e2fsck calls each image corrupt; ext4lite must refuse to
// read the file as data, read-write and read-only, and report it, naming
// the inode and the blocks, through OnCorruption.
func TestBlockValidity(t *testing.T) {
	needTool(t, "e2fsck")
	base := mkfsExt4(t, "64M")
	src := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(src, []byte("file data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	debugfs(t, base, true, "write "+src+" f")
	mustClean(t, base)

	probe := openRO(t, base)
	ino, err := probe.Lookup(RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	if buf := make([]byte, 64); func() bool { n, _ := probe.ReadAt(ino, buf, 0); return string(buf[:n]) != "file data\n" }() {
		t.Fatal("the sound file does not read back")
	}
	d0 := probe.groups[0].desc
	blocks := probe.geo.blocksCount
	jblk := probe.jlog.exts[0].Physical + 5
	probe.Close()

	// block[5] of an inode whose extent tree is its root alone is the
	// physical start of its first extent.
	extentAt := func(blk uint64) string { return fmt.Sprintf("sif <%d> block[5] %d", ino, blk) }
	cases := []struct {
		name   string
		damage string
		want   []string // in the report
	}{
		{"extent on the inode table", extentAt(d0.InodeTable() + 1), []string{fmt.Sprintf("blocks %d-%d", d0.InodeTable()+1, d0.InodeTable()+1), "inode table"}},
		{"extent on the block bitmap", extentAt(d0.BlockBitmap()), []string{fmt.Sprintf("blocks %d-%d", d0.BlockBitmap(), d0.BlockBitmap()), "block bitmap"}},
		{"extent on the inode bitmap", extentAt(d0.InodeBitmap()), []string{"inode bitmap"}},
		{"extent on the group descriptors", extentAt(1), []string{"blocks 1-1", "descriptor table"}},
		{"extent on the reserved descriptor blocks", extentAt(2), []string{"blocks 2-2", "descriptor table"}},
		{"extent on the journal", extentAt(jblk), []string{fmt.Sprintf("blocks %d-%d", jblk, jblk), "journal"}},
		{"extent one past the end", extentAt(blocks), []string{fmt.Sprintf("blocks %d-%d", blocks, blocks), "beyond"}},
		{"i_size 2^63", fmt.Sprintf("sif <%d> size 0x8000000000000000", ino), []string{"i_size", "negative"}},
		{"i_size past the extent format", fmt.Sprintf("sif <%d> size %d", ino, uint64(1)<<44), []string{"i_size", "largest size"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "damaged.img")
			copyFile(t, base, img)
			debugfs(t, img, true, c.damage)
			res, err := Check(img)
			if err != nil {
				t.Fatal(err)
			}
			if res.Clean || res.Checker != "e2fsck" {
				t.Fatalf("%s finds the damaged image clean: exit %d\n%s", res.Checker, res.ExitCode, res.Output)
			}
			for _, ro := range []bool{false, true} {
				var reports []string
				fs := openWith(t, img, Options{ReadOnly: ro, OnCorruption: func(err error) { reports = append(reports, err.Error()) }})
				st, statErr := fs.Stat(ino)
				_, readErr := fs.ReadAt(ino, make([]byte, 64), 0)
				if !errors.Is(readErr, ErrCorrupt) {
					t.Errorf("read-only %v: stat %+v %v, read %v, want an error wrapping ErrCorrupt", ro, st, statErr, readErr)
				}
				all := strings.Join(reports, "\n")
				for _, w := range append([]string{fmt.Sprintf("inode %d", ino)}, c.want...) {
					if !strings.Contains(all, w) {
						t.Errorf("read-only %v: the reports %q do not say %q", ro, reports, w)
					}
				}
				if err := fs.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			}
		})
	}
}

// TestAllocationAvoidsMetadata: a block bitmap that marks every block free
// (on a volume without checksums, which would catch it first) must not
// make a write put file data over the superblock, descriptors or inode
// table; the write fails as corruption instead.
func TestAllocationAvoidsMetadata(t *testing.T) {
	img := mkfsExt4(t, "64M", "-O", "^metadata_csum")
	probe := openRO(t, img)
	bitmap := probe.groups[0].desc.BlockBitmap()
	probe.Close()
	debugfs(t, img, true, fmt.Sprintf("zap_block -p 0 %d", bitmap))
	if res, err := Check(img); err != nil || res.Clean {
		t.Fatalf("e2fsck finds the zeroed bitmap clean: %+v %v", res, err)
	}
	var reports []string
	fs := openWith(t, img, Options{OnCorruption: func(err error) { reports = append(reports, err.Error()) }})
	f, err := fs.Create(RootIno, "f", 0o644, Owner{})
	if err == nil {
		_, err = fs.WriteAt(f, []byte("file data"), 0)
		if err == nil {
			err = fs.Sync()
		}
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("writing with a zeroed block bitmap: %v, want an error wrapping ErrCorrupt", err)
	}
	if all := strings.Join(reports, "\n"); !strings.Contains(all, "block bitmap marks as free") {
		t.Errorf("the reports %q do not say the bitmap marks metadata free", reports)
	}
	fs.Close()
	// The superblock is intact: the image still opens.
	openRO(t, img).Close()
}
