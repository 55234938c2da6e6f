package main

// Valid volumes made with unusual mke2fs options: each works or is refused.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"z.gfire.dev/gvx/internal/battery"
)

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
