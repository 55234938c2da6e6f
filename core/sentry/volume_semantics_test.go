package sentry

import (
	"os/exec"
	"strings"
	"testing"
)

// aclDefault is a default ACL in the posix_acl_xattr format: owner rwx,
// user 1000 r, group r-x, mask r-x, other none.
const aclDefault = "02000000" + "01000700ffffffff" + "02000400e8030000" + "04000500ffffffff" + "10000500ffffffff" + "20000000ffffffff"

// aclInherited is the access ACL a file created with mode 0644 in a
// directory with aclDefault gets: the mask and owner follow the mode.
const aclInherited = "02000000" + "01000600ffffffff" + "02000400e8030000" + "04000500ffffffff" + "10000400ffffffff" + "20000000ffffffff"

// semanticsScript exercises POSIX behaviour the VFS layer implements on
// top of ext4lite, printing one line per check.
const semanticsScript = `
set -e
cd /data
echo keep > f; exec 3< f; rm f; echo "unlinked open: $(cat <&3)"; exec 3<&-
mkdir gone; cd gone; rmdir ../gone; echo "removed cwd lists: [$(ls -a . 2>&1 | tr '\n' ' ')]"; cd /data
echo a > a; echo b > b
/tmp/fstool rename a b exchange; echo "exchange: $(cat a) $(cat b)"
/tmp/fstool rename a b noreplace 2>/dev/null || echo "noreplace: refused"
/tmp/fstool rename a c whiteout; echo "whiteout: $(stat -c '%F %t:%T' a) $(cat c)"
mkdir dx dy; echo in > dx/f; touch dy/g; /tmp/fstool rename dx dy exchange; echo "dir exchange: $(ls dx) $(ls dy)"
ln c c2; mv c2 c; echo "rename onto own link: $(ls c c2 | tr '\n' ' ')$(stat -c %h c)"
mv dy dx/inside 2>/dev/null; echo "dir moved: $(ls dx | tr '\n' ' ')"
mv dx dx/inside/x 2>/dev/null || echo "into itself: refused"
mkdir acl; /tmp/fstool setxattrhex acl system.posix_acl_default ` + aclDefault + `
touch acl/f; mkdir acl/sub
echo "acl file: $(stat -c %a acl/f) $(/tmp/fstool getxattrhex acl/f system.posix_acl_access)"
echo "acl dir: $(stat -c %a acl/sub) $(/tmp/fstool getxattrhex acl/sub system.posix_acl_default)"
chmod 600 acl/f; echo "acl chmod: $(/tmp/fstool getxattrhex acl/f system.posix_acl_access)"
head -c 12288 /dev/zero | tr '\0' a > p
/tmp/fstool fallocate p 0 12288 8192
echo "allocated: $(wc -c < p) $(tail -c 8192 p | tr -d '\0' | wc -c) $(head -c 12288 p | tr -d a | wc -c)"
/tmp/fstool fallocate p 3 4096 4096
echo "punched: $(wc -c < p) $(head -c 8192 p | tail -c 4096 | tr -d '\0' | wc -c) $(head -c 4096 p | tr -d a | wc -c)"
/tmp/fstool fallocate p 16 0 100
echo "zeroed: $(wc -c < p) $(head -c 100 p | tr -d '\0' | wc -c) $(head -c 4096 p | tail -c 3996 | tr -d a | wc -c)"
/tmp/fstool fallocate p 1 20480 4096
echo "keep size: $(wc -c < p)"
/tmp/fstool fallocate /tmp/fstool 3 0 4096 2>/dev/null || echo "tmpfs punch: refused"
truncate -s 5000 p; echo "truncated: $(wc -c < p) $(tr -d a < p | wc -c)"
truncate -s 9000 p; echo "extended: $(wc -c < p) $(tail -c 4000 p | tr -d '\0' | wc -c)"
mkdir -m 1777 sticky; echo r > sticky/rootfile; chmod 666 sticky/rootfile
echo s > sticky/suid; chmod 4777 sticky/suid
echo secret > private; chmod 600 private
`

// asUserScript runs as uid 1000 after semanticsScript.
const asUserScript = `
cd /data
rm sticky/rootfile 2>/dev/null || echo "sticky: refused"
cat private 2>/dev/null || echo "private: refused"
echo more >> sticky/suid; echo "suid after write: $(stat -c %a sticky/suid)"
touch mine 2>/dev/null || echo "root dir: refused"
/tmp/fstool setxattr sticky/rootfile trusted.x y 2>/dev/null || echo "trusted: refused"
`

func TestVolumeSemantics(t *testing.T) {
	img := newTestVolume(t, volumeDir(t), 256<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}})
	startIdle(t, s)
	installFstool(t, s)
	out := mustRun(t, s, semanticsScript)
	r := execAndWait(t, s, ProcessSpec{Argv: []string{"/bin/sh", "-c", asUserScript}, UID: 1000, GID: 1000})
	out += r.stdout
	for _, want := range []string{
		"unlinked open: keep\n",
		"removed cwd lists: []\n",
		"exchange: b a\n",
		"noreplace: refused\n",
		"whiteout: character special file 0:0 b\n",
		"dir exchange: g f\n",
		"rename onto own link: c c2 2\n",
		"dir moved: g inside \n",
		"into itself: refused\n",
		"acl file: 640 " + aclInherited + "\n",
		"acl dir: 750 " + aclDefault + "\n",
		"acl chmod: 02000000" + "01000600ffffffff" + "02000400e8030000" + "04000500ffffffff" + "10000000ffffffff" + "20000000ffffffff\n",
		"allocated: 20480 0 0\n",
		"punched: 20480 0 0\n",
		"zeroed: 20480 0 0\n",
		"keep size: 20480\n",
		"tmpfs punch: refused\n",
		"truncated: 5000 1004\n",
		"extended: 9000 0\n",
		"sticky: refused\n",
		"private: refused\n",
		"suid after write: 777\n",
		"root dir: refused\n",
		"trusted: refused\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s\nstderr:\n%s", out, r.stderr)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkImageClean(t, img)
}

// TestVolumeCorruptionIsEIO corrupts a directory block and an inode on
// the host: the guest gets EIO for those, and everything else works.
func TestVolumeCorruptionIsEIO(t *testing.T) {
	img := newTestVolume(t, volumeDir(t), 256<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}})
	startAndWait(t, s, sh("mkdir /data/dir /data/ok && echo x > /data/dir/f && echo y > /data/victim && echo z > /data/ok/f"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, req := range []string{"zap_block -f /dir -p 0x55 0", "sif /victim checksum 0x1234"} {
		if out, err := exec.Command("debugfs", "-w", "-R", req, img).CombinedOutput(); err != nil {
			t.Fatalf("debugfs -w -R %q: %v %s", req, err, out)
		}
	}
	var reports syncBuffer
	s = newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}, VolumeErrors: &reports})
	r := startAndWait(t, s, sh("cat /data/dir/f; cat /data/victim; cat /data/ok/f; echo new > /data/ok/g && cat /data/ok/g"))
	if strings.Count(r.stderr, "Input/output error") != 2 || r.stdout != "z\nnew\n" {
		t.Errorf("stdout %q stderr %q: want I/O errors for the corrupt parts and the rest intact", r.stdout, r.stderr)
	}
	if err := s.Close(); err != nil {
		t.Logf("Close: %v", err)
	}
	// The host learns why: each report names the volume and the damage.
	lines := strings.Split(strings.TrimSpace(reports.String()), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "volume "+img+" is corrupt") || !strings.Contains(lines[0], "rungv volume check "+img) ||
		!strings.Contains(reports.String(), "checksum") || !strings.Contains(reports.String(), "directory") {
		t.Errorf("VolumeErrors got %q; want a line per corrupt part naming the volume and the damage", reports.String())
	}
}
