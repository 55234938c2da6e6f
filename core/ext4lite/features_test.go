package ext4lite

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFeaturePolicy opens images with features ext4lite cannot write or
// read, and checks the error names them.
func TestFeaturePolicy(t *testing.T) {
	mkfs := needTool(t, "mkfs.ext4")
	cases := []struct {
		opts     []string
		feature  string
		readable bool // read-only open allowed
	}{
		{[]string{"-O", "inline_data"}, "inline_data", true},
		{[]string{"-O", "quota"}, "quota", true},
		{[]string{"-O", "project"}, "project", true},
		{[]string{"-O", "orphan_file"}, "orphan_file", true},
		{[]string{"-O", "fast_commit"}, "fast_commit", true},
		{[]string{"-O", "^extent", "-O", "^64bit", "-O", "^flex_bg"}, "no extent", true},
		{[]string{"-O", "encrypt"}, "encrypt", false},
		{[]string{"-O", "casefold"}, "casefold", false},
		{[]string{"-O", "bigalloc", "-C", "16384"}, "bigalloc", false},
		{[]string{"-O", "meta_bg,^resize_inode"}, "meta_bg", false},
		{[]string{"-O", "mmp"}, "mmp", false},
		{[]string{"-O", "ea_inode"}, "ea_inode", false},
	}
	for _, c := range cases {
		img := filepath.Join(t.TempDir(), "f.img")
		exec.Command("truncate", "-s", "64M", img).Run()
		args := append(append([]string{"-q", "-F", "-b", "4096"}, c.opts...), img)
		if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
			t.Logf("mkfs.ext4 %v: %v %s (skipped)", c.opts, err, out)
			continue
		}
		_, err := OpenVolume(img, Options{})
		if err == nil || !strings.Contains(err.Error(), c.feature) {
			t.Errorf("read-write open with %v: %v, want an error naming %q", c.opts, err, c.feature)
		}
		fs, err := OpenVolume(img, Options{ReadOnly: true})
		if c.readable {
			if err != nil {
				t.Errorf("read-only open with %v: %v", c.opts, err)
				continue
			}
			if _, err := fs.Lookup(RootIno, "lost+found"); err != nil {
				t.Errorf("read-only %v: lookup: %v", c.opts, err)
			}
			fs.Close()
		} else if err == nil || !strings.Contains(err.Error(), c.feature) {
			t.Errorf("read-only open with %v: %v, want an error naming %q", c.opts, err, c.feature)
		}
	}
}

// TestOtherLayouts runs the workload on images mkfs.ext4 makes with
// non-default options ext4lite still writes.
func TestOtherLayouts(t *testing.T) {
	for _, opts := range [][]string{
		{"-O", "metadata_csum_seed"},
		{"-O", "^metadata_csum"},            // crc16 group checksums (uninit_bg)
		{"-O", "^metadata_csum,^uninit_bg"}, // no checksums at all
		{"-O", "^has_journal"},
		{"-O", "^64bit"},
		{"-O", "^flex_bg"},
		{"-I", "128"},
		{"-I", "1024"},
		{"-b", "1024"},
		{"-b", "2048"},
	} {
		t.Run(strings.Join(opts, ""), func(t *testing.T) {
			img := mkfsExt4(t, "128M", opts...)
			fs := openRW(t, img)
			w := newWorkload(t, fs, 3)
			for range 1500 {
				w.step()
			}
			if err := fs.Close(); err != nil {
				t.Fatal(err)
			}
			mustClean(t, img)
			fs = openRO(t, img)
			w.fs = fs
			w.verifyFS(fs)
			withLoopMount(t, img, func(mnt string) {
				w.verifyHost(mnt, hostCheck{special: true, hardlinks: true, xattrs: true, owners: true})
			})
		})
	}
}

// TestConvertedExt3 changes an ext3 filesystem that got the extent feature
// later (tune2fs -O extent): its old files and directories are mapped by
// indirect blocks and become extent-mapped as ext4lite changes them.
func TestConvertedExt3(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot loop-mount to have Linux write ext3 files")
	}
	img := filepath.Join(t.TempDir(), "ext3.img")
	exec.Command("truncate", "-s", "128M", img).Run()
	if out, err := exec.Command(needTool(t, "mkfs.ext4"), "-q", "-F", "-t", "ext3", "-b", "4096", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs ext3: %v %s", err, out)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "ext3", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop mount impossible here (%v: %s)", err, out)
	}
	os.MkdirAll(filepath.Join(mnt, "old/dir"), 0o755)
	for i := range 300 {
		os.WriteFile(filepath.Join(mnt, "old/dir", fmt.Sprintf("file-with-long-name-%d", i)), bytes.Repeat([]byte{byte(i)}, 9000*(i%7)), 0o644)
	}
	big := bytes.Repeat([]byte("b"), 20<<20)
	os.WriteFile(filepath.Join(mnt, "old/big"), big, 0o644)
	exec.Command("umount", mnt).Run()
	if out, err := exec.Command("tune2fs", "-O", "extent", img).CombinedOutput(); err != nil {
		t.Fatalf("tune2fs: %v %s", err, out)
	}
	exec.Command("e2fsck", "-fy", img).Run()
	mustClean(t, img)

	fs := openRW(t, img)
	old := mustLookup(t, fs, RootIno, "old")
	dir := mustLookup(t, fs, old, "dir")
	for i := range 300 {
		name := fmt.Sprintf("file-with-long-name-%d", i)
		ino := mustLookup(t, fs, dir, name)
		switch i % 3 {
		case 0:
			fs.WriteAt(ino, []byte("appended"), int64(9000*(i%7)))
		case 1:
			fs.Truncate(ino, 1000)
		default:
			fs.Unlink(dir, name)
		}
	}
	for i := range 500 {
		fs.Create(dir, fmt.Sprintf("new-%d", i), 0o644, Owner{})
	}
	b := mustLookup(t, fs, old, "big")
	fs.Fallocate(b, FallocPunchHole|FallocKeepSize, 5<<20, 1<<20)
	fs.WriteAt(b, []byte("middle"), 10<<20)
	fs.Close()
	mustClean(t, img)
	withLoopMount(t, img, func(mnt string) {
		ents, err := os.ReadDir(filepath.Join(mnt, "old/dir"))
		if err != nil || len(ents) != 200+500 {
			t.Fatalf("Linux lists %d entries (%v), want 700", len(ents), err)
		}
		data, _ := os.ReadFile(filepath.Join(mnt, "old/big"))
		want := bytes.Clone(big)
		clear(want[5<<20 : 6<<20])
		copy(want[10<<20:], "middle")
		if !bytes.Equal(data, want) {
			t.Fatal("Linux reads the converted file differently")
		}
	})
}

// TestInlineDataReadOnly reads a filesystem where Linux kept small files,
// symlinks and directories inside their inodes.
func TestInlineDataReadOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot loop-mount to have Linux write inline data")
	}
	img := mkfsExt4(t, "64M", "-O", "inline_data")
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop mount impossible here (%v: %s)", err, out)
	}
	os.MkdirAll(filepath.Join(mnt, "small/sub"), 0o755)
	os.MkdirAll(filepath.Join(mnt, "many"), 0o755)
	for i := range 8 {
		os.WriteFile(filepath.Join(mnt, "small", fmt.Sprintf("f%d", i)), bytes.Repeat([]byte{'a' + byte(i)}, i*20), 0o644)
	}
	for i := range 300 {
		os.WriteFile(filepath.Join(mnt, "many", fmt.Sprintf("file-%d", i)), nil, 0o644)
	}
	os.WriteFile(filepath.Join(mnt, "tiny"), []byte("tiny"), 0o644)
	os.WriteFile(filepath.Join(mnt, "medium"), bytes.Repeat([]byte("m"), 120), 0o644)
	os.Symlink("target", filepath.Join(mnt, "small/link"))
	src := t.TempDir()
	if out, err := exec.Command("cp", "-a", mnt+"/.", src).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	exec.Command("umount", mnt).Run()
	if !strings.Contains(debugfs(t, img, false, "stat /small/sub"), "Size of inline data") {
		t.Skip("Linux did not inline the directory")
	}
	fs := openRO(t, img)
	n := compareWithHost(t, fs, RootIno, src, "lost+found")
	t.Logf("%d entries read back identically", n)
	fs.Close()
	mustClean(t, img)
}
