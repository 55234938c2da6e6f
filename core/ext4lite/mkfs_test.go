package ext4lite

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMkfsIsClean(t *testing.T) {
	for _, size := range []int64{8 << 20, 16 << 20, 64 << 20, 600 << 20, 1 << 30, 1025 << 20, 5 << 30, 17 << 30} {
		path := filepath.Join(t.TempDir(), "v.img")
		if err := Create(path, size); err != nil {
			t.Fatalf("Create(%d): %v", size, err)
		}
		mustClean(t, path)
	}
}

func TestMkfsMatchesMkfsExt4(t *testing.T) {
	needTool(t, "dumpe2fs")
	for _, size := range []string{"8M", "64M", "511M", "1G", "1025M", "4100M", "16G", "40G"} {
		ref := mkfsExt4(t, size)
		ours := filepath.Join(t.TempDir(), "ours.img")
		out, _ := exec.Command("stat", "-c", "%s", ref).Output()
		var n int64
		for _, c := range strings.TrimSpace(string(out)) {
			n = n*10 + int64(c-'0')
		}
		if err := Create(ours, n); err != nil {
			t.Fatal(err)
		}
		want := dumpFields(t, ref)
		got := dumpFields(t, ours)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %q, mkfs.ext4 has %q", size, k, got[k], v)
			}
		}
	}
}

// dumpFields returns the dumpe2fs -h fields that must match mkfs.ext4's.
func dumpFields(t *testing.T, path string) map[string]string {
	out, err := exec.Command("dumpe2fs", "-h", path).Output()
	if err != nil {
		t.Fatalf("dumpe2fs: %v", err)
	}
	keep := []string{"Filesystem features", "Filesystem flags", "Default mount options", "Inode count",
		"Block count", "Reserved block count", "Overhead clusters", "Free blocks", "Free inodes",
		"Block size", "Reserved GDT blocks", "Blocks per group", "Inodes per group", "Inode blocks per group",
		"Flex block group size", "Inode size", "Required extra isize", "Desired extra isize", "Journal inode",
		"Journal backup", "Checksum type", "Total journal size", "Total journal blocks", "Journal features",
		"Default directory hash", "First inode", "Maximum mount count"}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		for _, want := range keep {
			if k == want {
				m[k] = strings.TrimSpace(v)
			}
		}
	}
	return m
}
