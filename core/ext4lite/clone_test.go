package ext4lite

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/internal/filehash"
)

// makeGolden creates a volume in dir with a workload's tree on it.
func makeGoldenVolume(t *testing.T, dir string, size int64) (string, *workload) {
	t.Helper()
	golden := filepath.Join(dir, "golden.ext4")
	if err := Create(golden, size); err != nil {
		t.Fatal(err)
	}
	fs := openRW(t, golden)
	w := newWorkload(t, fs, 11)
	for range 1500 {
		w.step()
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	return golden, w
}

// exerciseClones clones golden twice, changes both episodes independently
// and checks that each holds its own tree, that both are e2fsck-clean, that
// flattening works, and that the golden never changed.
func exerciseClones(t *testing.T, dir, golden string, gw *workload, want blockdev.CloneMethod) {
	sum := filehash.SHA256(t, golden)
	var episodes []*workload
	for i, seed := range []uint64{21, 22} {
		ep := filepath.Join(dir, "episode"+string(rune('a'+i)))
		start := time.Now()
		method, err := Clone(golden, ep)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("clone by %v in %v", method, time.Since(start))
		if method != want {
			t.Fatalf("cloned by %v, want %v", method, want)
		}
		fs := openRW(t, ep)
		// Continue the golden's model in the episode.
		w := cloneWorkload(t, gw, fs, seed)
		for range 1500 {
			w.step()
		}
		if err := fs.Close(); err != nil {
			t.Fatal(err)
		}
		mustClean(t, ep)
		episodes = append(episodes, w)
		if filehash.SHA256(t, golden) != sum {
			t.Fatal("the golden changed")
		}
	}
	for i, w := range episodes {
		ep := filepath.Join(dir, "episode"+string(rune('a'+i)))
		fs := openRO(t, ep)
		w.verifyFS(fs)
		fs.Close()
		flat := ep + ".flat"
		if err := Flatten(ep, flat); err != nil {
			t.Fatal(err)
		}
		if isDelta, _ := blockdev.IsDelta(flat); isDelta {
			t.Fatal("flattened image is still a delta")
		}
		mustClean(t, flat)
		fs = openRW(t, flat)
		w.verifyFS(fs)
		fs.Close()
	}
	if filehash.SHA256(t, golden) != sum {
		t.Fatal("the golden changed")
	}
}

// cloneWorkload copies a workload's model for a new filesystem.
func cloneWorkload(t testing.TB, gw *workload, fs *FS, seed uint64) *workload {
	w := newWorkload(t, fs, seed)
	w.dirs, w.files = nil, nil
	copies := map[*mnode]*mnode{}
	var cp func(n *mnode) *mnode
	cp = func(n *mnode) *mnode {
		if c, ok := copies[n]; ok {
			return c
		}
		c := *n
		c.data = append([]byte(nil), n.data...)
		c.xattrs = map[string][]byte{}
		for k, v := range n.xattrs {
			c.xattrs[k] = v
		}
		copies[n] = &c
		if n.kids != nil {
			c.kids = map[string]*mnode{}
			for k, v := range n.kids {
				c.kids[k] = cp(v)
			}
			w.addDir(&c)
		} else {
			w.addFile(&c)
		}
		return &c
	}
	w.root = cp(gw.root)
	for _, c := range copies {
		if c.parent != nil {
			c.parent = copies[c.parent]
		}
	}
	w.root.parent = w.root
	return w
}

// TestCloneDeltaOnExt4 clones on a host filesystem without reflinks: the
// episode is a delta over the read-only golden.
func TestCloneDeltaOnExt4(t *testing.T) {
	dir := t.TempDir()
	golden, gw := makeGoldenVolume(t, dir, 256<<20)
	if err := exec.Command("cp", "--reflink=always", golden, filepath.Join(dir, "probe")).Run(); err == nil {
		t.Skip("this host filesystem reflinks; the delta path is tested elsewhere")
	}
	exerciseClones(t, dir, golden, gw, blockdev.CloneDelta)

	// A delta never pairs with another golden.
	other := filepath.Join(dir, "other.ext4")
	if err := Create(other, 256<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := blockdev.OpenDelta(filepath.Join(dir, "episodea"), other, false); !errors.Is(err, blockdev.ErrWrongGolden) {
		t.Fatalf("delta opened over another golden: %v", err)
	}
	// Nor with its golden once that was written.
	fs := openRW(t, golden)
	fs.Close()
	if _, err := OpenVolume(filepath.Join(dir, "episodea"), Options{}); !errors.Is(err, blockdev.ErrWrongGolden) {
		t.Fatalf("delta opened over its golden after the golden was written: %v", err)
	}
}

// TestCloneReflinkOnXFS clones on a loop-mounted XFS with reflink=1.
func TestCloneReflinkOnXFS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot loop-mount an XFS file")
	}
	mkfs := needTool(t, "mkfs.xfs")
	img := filepath.Join(t.TempDir(), "xfs.img")
	if err := exec.Command("truncate", "-s", "2G", img).Run(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		t.Skipf("mkfs.xfs -m reflink=1 failed (%v: %s)", err, out)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("loop mount of XFS impossible here (%v: %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v %s", err, out)
		}
	})
	golden, gw := makeGoldenVolume(t, mnt, 512<<20)
	exerciseClones(t, mnt, golden, gw, blockdev.CloneReflink)
}
