package ext4lite

import (
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
