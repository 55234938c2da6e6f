package sentry

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/fstree"
	"z.gfire.dev/gvx/core/internal/treecheck"
)

// writeTreeScript builds, on the volume at /data, a tree with every kind
// of file the Sentry can make, as a guest would.
const writeTreeScript = `
set -e
cd /data
mkdir -p tree/dir/sub tree/big tree/bin tree/old
echo hello > tree/dir/file
head -c 300000 /bin/busybox > tree/dir/chunk
ln -s file tree/dir/fastlink
ln -s ../../a/target/that/is/long/enough/to/need/a/block/of/its/own/rather/than/the/inode/sixty/bytes tree/dir/slowlink
ln tree/dir/file tree/dir/hardlink
mkfifo tree/fifo
mknod tree/whiteout c 0 0
mknod tree/loopdev b 7 3
mkdir tree/sockdir
dd if=/dev/urandom of=tree/sparse bs=4096 count=1 seek=2500 2>/dev/null
truncate -s 50000000 tree/sparse2
i=0
while [ $i -lt 3000 ]; do echo "entry $i" > tree/big/f$i; i=$((i+1)); done
rm tree/big/f7 tree/big/f2999
echo moved > tree/old/inside
mkdir tree/old/deeper
mv tree/old tree/renamed
chown 1000:1000 tree/dir/chunk
chmod 0640 tree/dir/chunk
chown 0:1000 tree/dir/sub
chmod 2775 tree/dir/sub
touch -d @1600000000 tree/dir/sub
cp /bin/busybox tree/bin/busybox
tree/bin/busybox echo exec-from-volume
/tmp/fstool setxattr tree/dir/file user.color blue
/tmp/fstool setxattr tree/dir trusted.overlay.opaque y
/tmp/fstool setxattr tree/dir/file security.selinux system_u:object_r:etc_t:s0
/tmp/fstool setxattr tree/big user.long "$(head -c 3000 /bin/busybox | od -An -tx1 | tr -d ' \n' | head -c 3000)"
/tmp/fstool utimens tree/dir/file 1600000000 123456789
/tmp/fstool tmpfile tree named-tmpfile
/tmp/fstool mmap tree/mapped
touch tree/dir/sub/setgid-child
mkdir tree/dir/sub/setgid-dir
`

func TestVolumeTree(t *testing.T) {
	dir := volumeDir(t)
	img := newTestVolume(t, dir, 1<<30)
	vols := []Volume{{Path: img, Target: "/data"}}

	s := newSandbox(t, Config{Volumes: vols})
	startIdle(t, s)
	installFstool(t, s)
	out := mustRun(t, s, writeTreeScript)
	if !strings.Contains(out, "exec-from-volume") || !strings.Contains(out, "mmap ok") {
		t.Errorf("exec or mmap on the volume failed:\n%s", out)
	}
	// Setgid directories pass on their group and, to directories, the bit.
	out = mustRun(t, s, `cd /data/tree/dir/sub; stat -c '%g %a' setgid-child setgid-dir`)
	if out != "1000 644\n1000 2755\n" {
		t.Errorf("setgid inheritance: got %q", out)
	}
	want, wantX := guestListing(t, s, "/data/tree")
	if len(want) < 3000 {
		t.Fatalf("the guest lists %d entries, want over 3000", len(want))
	}
	if e := want["dir/file"]; e.Nlink != 2 || e.Mtime != (fstree.Timespec{Sec: 1600000000, Nsec: 123456789}) {
		t.Errorf("dir/file: %+v, want 2 links and mtime 1600000000.123456789", e)
	}
	if e := want["whiteout"]; e.Mode&fstree.TypeMask != fstree.TypeChar || e.Rdev != 0 {
		t.Errorf("whiteout: %+v, want a character device 0:0", e)
	}
	if wantX["dir"]["trusted.overlay.opaque"] != "y" || wantX["dir/file"]["user.color"] != "blue" || len(wantX["big"]["user.long"]) != 3000 {
		t.Errorf("xattrs as the guest sees them: %v", wantX)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkImageClean(t, img)

	t.Run("debugfs", func(t *testing.T) {
		dump := filepath.Join(dir, "rdump")
		if err := os.Mkdir(dump, 0o755); err != nil {
			t.Fatal(err)
		}
		debugfs(t, img, "rdump /tree "+dump)
		got, _ := hostListing(t, filepath.Join(dump, "tree"))
		// rdump writes regular files, directories and symlinks only,
		// hard links as copies, times to the second and none for
		// symlinks, and no setgid bits on directories.
		exp := make(treecheck.Listing)
		for p, e := range want {
			switch e.Mode & fstree.TypeMask {
			case fstree.TypeRegular, fstree.TypeDir, fstree.TypeSymlink:
				e.Mtime.Nsec = 0
				exp[p] = e
			}
		}
		for p, e := range got {
			e.Mtime.Nsec = 0
			if e.Mode&fstree.TypeMask == fstree.TypeSymlink {
				e.Mtime = exp[p].Mtime
			}
			got[p] = e
		}
		if d := treecheck.Diff(exp, got, treecheck.Ignore{DirMtime: true, Hardlinks: true, SpecialBits: true}); len(d) > 0 {
			t.Errorf("debugfs rdump differs from what the guest wrote:\n%s", strings.Join(d, "\n"))
		}
		stat := debugfs(t, img, "stat /tree/whiteout")
		if !strings.Contains(stat, "Type: character special") || !strings.Contains(stat, "Device major/minor number: 00:00") {
			t.Errorf("debugfs stat of the whiteout:\n%s", stat)
		}
		if ea := debugfs(t, img, "ea_list /tree/dir"); !strings.Contains(ea, "trusted.overlay.opaque") {
			t.Errorf("debugfs ea_list /tree/dir lacks trusted.overlay.opaque:\n%s", ea)
		}
	})

	t.Run("loop mount", func(t *testing.T) {
		mnt := filepath.Join(dir, "mnt")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-o", "loop,ro", img, mnt).CombinedOutput(); err != nil {
			t.Skipf("cannot loop-mount the image here (needs root and loop devices): %v %s", err, out)
		}
		defer exec.Command("umount", mnt).Run()
		got, gotX := hostListing(t, filepath.Join(mnt, "tree"))
		if d := treecheck.Diff(want, got, treecheck.Ignore{}); len(d) > 0 {
			t.Errorf("Linux sees a different tree:\n%s", strings.Join(d, "\n"))
		}
		if d := diffXattrs(wantX, gotX); len(d) > 0 {
			t.Errorf("Linux sees different xattrs:\n%s", strings.Join(d, "\n"))
		}
	})

	t.Run("second sandbox", func(t *testing.T) {
		s2 := newSandbox(t, Config{Volumes: vols})
		startIdle(t, s2)
		installFstool(t, s2)
		got, gotX := guestListing(t, s2, "/data/tree")
		if d := treecheck.Diff(want, got, treecheck.Ignore{}); len(d) > 0 {
			t.Errorf("a second sandbox sees a different tree:\n%s", strings.Join(d, "\n"))
		}
		if d := diffXattrs(wantX, gotX); len(d) > 0 {
			t.Errorf("a second sandbox sees different xattrs:\n%s", strings.Join(d, "\n"))
		}
		if out := mustRun(t, s2, "/data/tree/bin/busybox echo exec-again; rm -rf /data/tree/big; ls /data/tree"); !strings.Contains(out, "exec-again") {
			t.Errorf("exec from the remounted volume: %q", out)
		}
		if err := s2.Close(); err != nil {
			t.Fatal(err)
		}
		checkImageClean(t, img)
	})
}
