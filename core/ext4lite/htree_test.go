package ext4lite

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// TestKernelHtreeDirectory has Linux build an indexed directory, then
// reads it and changes it through ext4lite (which strips the index) and
// checks the result with e2fsck and Linux.
func TestKernelHtreeDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot loop-mount to have Linux build an htree directory")
	}
	img := mkfsExt4(t, "64M")
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop mount impossible here (%v: %s)", err, out)
	}
	const count = 5000
	var want []string
	for i := range count {
		name := fmt.Sprintf("kernel-file-%05d-%s", i, strings.Repeat("x", i%40))
		want = append(want, name)
		if err := os.WriteFile(filepath.Join(mnt, "dir", name), nil, 0o644); err != nil {
			if os.IsNotExist(err) {
				if err := os.Mkdir(filepath.Join(mnt, "dir"), 0o755); err != nil {
					t.Fatal(err)
				}
				err = os.WriteFile(filepath.Join(mnt, "dir", name), nil, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
	if out := debugfs(t, img, false, "stat /dir"); !strings.Contains(out, "Flags: 0x81000") {
		t.Fatalf("Linux did not index the directory:\n%s", out)
	}

	fs := openRW(t, img)
	dir := mustLookup(t, fs, RootIno, "dir")
	var got []string
	if err := fs.ReadDir(dir, 0, func(d Dirent) bool {
		if d.Name != "." && d.Name != ".." {
			got = append(got, d.Name)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if strings.Join(got, "/") != strings.Join(want, "/") {
		t.Fatalf("read %d entries of the htree directory, want %d", len(got), len(want))
	}
	for i := 0; i < count; i += 3 {
		if err := fs.Unlink(dir, want[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 1000 {
		if _, err := fs.Create(dir, fmt.Sprintf("ext4lite-%d", i), 0o600, Owner{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.Rename(dir, want[1], RootIno, "moved", 0); err != nil {
		t.Fatal(err)
	}
	st, _ := fs.Stat(dir)
	if st.Flags&disk.FlagIndex != 0 {
		t.Fatal("the index survived a change")
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	mustClean(t, img)
	withLoopMount(t, img, func(mnt string) {
		ents, err := os.ReadDir(filepath.Join(mnt, "dir"))
		wantN := count - (count+2)/3 - 1 + 1000
		if err != nil || len(ents) != wantN {
			t.Fatalf("Linux lists %d entries (%v), want %d", len(ents), err, wantN)
		}
		if _, err := os.Stat(filepath.Join(mnt, "dir", want[4])); err != nil {
			t.Fatal(err)
		}
	})
}
