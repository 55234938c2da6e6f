package ext4lite

import (
	"os"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

func verifyImage(t *testing.T, path string) []string {
	t.Helper()
	dev, err := blockdev.OpenFile(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	problems, err := Verify(dev)
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// TestVerifyAgreesWithE2fsck: images e2fsck finds clean, Verify finds
// clean; damage e2fsck would fix, Verify reports.
func TestVerifyAgreesWithE2fsck(t *testing.T) {
	path := newVolume(t, 128<<20)
	fs := openRW(t, path)
	w := newWorkload(t, fs, 5)
	for range 3000 {
		w.step()
	}
	fs.Close()
	mustClean(t, path)
	if p := verifyImage(t, path); len(p) > 0 {
		t.Fatalf("Verify finds problems e2fsck does not: %q", p)
	}
	for _, img := range []string{mkfsExt4(t, "64M"), mkfsExt4(t, "64M", "-b", "1024")} {
		if p := verifyImage(t, img); len(p) > 0 {
			t.Fatalf("Verify finds problems in a fresh mkfs.ext4 image: %q", p)
		}
	}

	damage := []struct {
		name   string
		damage func(fs *FS)
		want   string
	}{
		{"bitmap bit", func(fs *FS) {
			b, _ := fs.blockBitmap(0)
			data := fs.modify(b)
			data[len(data)/16] ^= 0x10 // somewhere in the data blocks
			fs.groups[0].blockBitmapDirty = true
			fs.markGroupDirty(0)
		}, "block"},
		{"link count", func(fs *FS) {
			n, _ := fs.getInode(w.files[0].ino)
			n.raw.SetLinks(n.raw.Links() + 1)
			fs.markDirty(n)
		}, "links"},
		{"group count", func(fs *FS) {
			d := fs.groups[0].desc
			d.SetFreeInodes(d.FreeInodes() - 1)
			fs.markGroupDirty(0)
		}, "inodes free"},
	}
	for _, d := range damage {
		img := path + "." + strings.ReplaceAll(d.name, " ", "-")
		copyFile(t, path, img)
		fs := openRW(t, img)
		fs.mu.Lock()
		fs.op = opState{}
		d.damage(fs)
		fs.flushObjects()
		fs.commit()
		fs.mu.Unlock()
		fs.Close()
		if res, err := Check(img); err != nil || res.Clean {
			t.Fatalf("%s: e2fsck finds no damage (%v)", d.name, err)
		}
		p := verifyImage(t, img)
		if len(p) == 0 || !strings.Contains(strings.Join(p, "\n"), d.want) {
			t.Fatalf("%s: Verify reports %q, want a problem about %q", d.name, p, d.want)
		}
		os.Remove(img)
	}
	_ = disk.RootIno
}
