package sentry

import (
	"fmt"
	"strings"
	"testing"
)

// overlayScript mounts overlays inside the guest with upper and work
// directories on the ext4 volume at /data, as Docker's overlay2 does, and
// prints what it sees.
const overlayScript = `
set -e
cd /data
mkdir -p ov/lower/keep ov/lower/gone-dir ov/upper ov/work ov/merged
echo low > ov/lower/keep/file
echo low > ov/lower/gone
echo low > ov/lower/gone-dir/x
echo low > ov/lower/moveme
mount -t overlay overlay -o lowerdir=/data/ov/lower,upperdir=/data/ov/upper,workdir=/data/ov/work,index=off,redirect_dir=off,metacopy=off ov/merged
echo copied-up >> ov/merged/keep/file
rm ov/merged/gone
rm -rf ov/merged/gone-dir
mkdir ov/merged/gone-dir
echo new > ov/merged/gone-dir/y
mv ov/merged/moveme ov/merged/moved
echo "merged: $(ls ov/merged | tr '\n' ' ')"
echo "gone-dir: $(ls ov/merged/gone-dir | tr '\n' ' ')"
echo "file: $(cat ov/merged/keep/file | tr '\n' ' ')"
echo "lower: $(cat ov/lower/keep/file) $(ls ov/lower | tr '\n' ' ')"
echo "whiteout: $(stat -c '%F %t:%T' ov/upper/gone)"
echo "opaque: $(/tmp/fstool getxattr ov/upper/gone-dir trusted.overlay.opaque)"
umount ov/merged
mount -t overlay overlay -o ro,nosuid,lowerdir=/data/ov/lower,upperdir=/data/ov/upper,workdir=/data/ov/work ov/merged
echo "flags: $(grep ' /data/ov/merged ' /proc/mounts | cut -d' ' -f4)"
touch ov/merged/x 2>/dev/null || echo "ro: refused"
umount ov/merged
mount -t overlay overlay -o lowerdir=/data/ov/lower,upperdir=/proc/self,workdir=/data/ov/work ov/merged 2>/dev/null || echo "proc upper: refused"
mount -t overlay overlay -o lowerdir=/data/ov/lower,upperdir=/dev,workdir=/dev ov/merged 2>/dev/null || echo "dev upper: refused"
mount -t overlay overlay -o lowerdir=/data/ov/lower,upperdir=/data/ov/upper,workdir=/data/ov/work,metacopy=on ov/merged 2>/dev/null || echo "metacopy=on: refused"
mkdir -p /tmp/t && mount -t tmpfs none /tmp/t && mkdir /tmp/t/u /tmp/t/w
mount -t overlay overlay -o lowerdir=/data/ov/lower,upperdir=/tmp/t/u,workdir=/tmp/t/w ov/merged && echo "tmpfs upper: ok" && umount ov/merged
`

func TestVolumeOverlay(t *testing.T) {
	img := newTestVolume(t, volumeDir(t), 512<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}})
	startIdle(t, s)
	installFstool(t, s)
	out := mustRun(t, s, overlayScript)
	for _, want := range []string{
		"merged: gone-dir keep moved \n",
		"gone-dir: y \n",
		"file: low copied-up \n",
		"lower: low gone gone-dir keep moveme \n",
		"whiteout: character special file 0:0\n",
		"opaque: y\n",
		"flags: ro,nosuid\n",
		"ro: refused\n",
		"proc upper: refused\n",
		"dev upper: refused\n",
		"metacopy=on: refused\n",
		"tmpfs upper: ok\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkImageClean(t, img)
	if stat := debugfs(t, img, "stat /ov/upper/gone"); !strings.Contains(stat, "Type: character special") {
		t.Errorf("the whiteout on disk:\n%s", stat)
	}
	if ea := debugfs(t, img, "ea_list /ov/upper/gone-dir"); !strings.Contains(ea, "trusted.overlay.opaque") {
		t.Errorf("the opaque directory on disk:\n%s", ea)
	}
}

// TestVolumeOverlayRelativeLayers mounts an overlay the way Docker does
// when absolute layer paths would not fit in a page: from the layer
// directory, with relative "l/…" lowerdirs.
func TestVolumeOverlayRelativeLayers(t *testing.T) {
	img := newTestVolume(t, volumeDir(t), 512<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}})
	startIdle(t, s)
	const layers = 60
	var script, lowers strings.Builder
	script.WriteString("set -e\nmkdir -p /data/overlay2/l /data/overlay2/top/diff /data/overlay2/top/work /data/overlay2/top/merged\ncd /data/overlay2\n")
	for i := range layers {
		// Docker's layer directories have 64-hex names; the l/ links
		// 26 characters.
		long := fmt.Sprintf("%064x", i)
		short := fmt.Sprintf("L%025d", i)
		fmt.Fprintf(&script, "mkdir -p %s/diff && echo %d > %s/diff/layer%d && echo %d > %s/diff/top && ln -s ../%s/diff l/%s\n", long, i, long, i, i, long, long, short)
		if i > 0 {
			lowers.WriteString(":")
		}
		// The first lowerdir is the topmost: layer 59 first.
		lowers.WriteString("l/" + fmt.Sprintf("L%025d", layers-1-i))
	}
	opts := "lowerdir=" + lowers.String() + ",upperdir=top/diff,workdir=top/work"
	if abs := len(opts) + layers*(len("/data/overlay2/")+64+len("/diff")-len("l/")-26); abs < 4096 {
		t.Fatalf("test setup: absolute options would take only %d bytes, not more than a page", abs)
	}
	fmt.Fprintf(&script, "mount -t overlay overlay -o %s top/merged\n", opts)
	script.WriteString("ls top/merged | wc -l; cat top/merged/top; cat top/merged/layer0; echo up > top/merged/new; cat top/diff/new; umount top/merged\n")
	out := mustRun(t, s, script.String())
	if want := fmt.Sprintf("%d\n%d\n0\nup\n", layers+1, layers-1); out != want {
		t.Errorf("merged view: got %q, want %q", out, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkImageClean(t, img)
}
