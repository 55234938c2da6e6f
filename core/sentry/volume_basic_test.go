package sentry

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/core/internal/filehash"
)

// TestVolumeBasics needs nothing but busybox, so it also runs under the
// hostile harness: volumes work unprivileged.
func TestVolumeBasics(t *testing.T) {
	img := newTestVolume(t, volumeDir(t), 256<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/vol/data"}}})
	r := startAndWait(t, s, sh(`set -e
cd /vol/data
echo content > f && cat f
mkdir sbin && cp /bin/busybox sbin/busybox && ./sbin/busybox true && echo exec ok
mkdir d && mv f d/g && ls d
dd if=/dev/zero of=big bs=1M count=3 2>/dev/null && wc -c < big
grep ' /vol/data ' /proc/mounts | cut -d' ' -f3
stat -f -c %T .`))
	if r.status.ExitCode() != 0 {
		t.Fatalf("%v\n%s\n%s", r.status, r.stdout, r.stderr)
	}
	if want := "content\nexec ok\ng\n3145728\next4\next2/ext3\n"; r.stdout != want {
		t.Errorf("got %q, want %q", r.stdout, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkImageClean(t, img)
}

func TestVolumeReadOnly(t *testing.T) {
	img := newTestVolume(t, volumeDir(t), 256<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data"}}})
	startIdle(t, s)
	mustRun(t, s, "echo kept > /data/f")
	// SyncVolumes makes it durable while the sandbox runs: a copy of the
	// image taken now has it once its journal is replayed.
	if err := s.SyncVolumes(context.Background()); err != nil {
		t.Fatal(err)
	}
	snapshot := img + ".synced"
	if out, err := runHost("cp", "--sparse=always", img, snapshot); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	fs, err := ext4lite.OpenVolume(snapshot, ext4lite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lookup(ext4lite.RootIno, "f"); err != nil {
		t.Errorf("after SyncVolumes the image lacks /f: %v", err)
	}
	fs.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := filehash.SHA256(t, img)
	s = newSandbox(t, Config{Volumes: []Volume{{Path: img, Target: "/data", ReadOnly: true}}})
	r := startAndWait(t, s, sh(`cat /data/f; echo x > /data/g || echo refused; rm /data/f || echo refused; grep ' /data ' /proc/mounts | cut -d' ' -f4`))
	if want := "kept\nrefused\nrefused\nro\n"; r.stdout != want {
		t.Errorf("got %q, want %q (stderr %s)", r.stdout, want, r.stderr)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := filehash.SHA256(t, img); after != before {
		t.Error("a read-only volume's image changed")
	}
}

func TestVolumeBadImages(t *testing.T) {
	dir := volumeDir(t)
	notExt4 := filepath.Join(dir, "not.ext4")
	if err := os.WriteFile(notExt4, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := os.Open(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	for _, c := range []struct {
		vol  Volume
		want string
	}{
		{Volume{Path: notExt4, Target: "/data"}, "rungv volume check"},
		{Volume{Path: filepath.Join(dir, "missing.ext4"), Target: "/data"}, "no such file"},
		{Volume{Path: notExt4, Target: "data"}, "absolute"},
		{Volume{Target: "/data"}, "needs a Path or a File"},
		{Volume{Path: notExt4, File: img, Target: "/data"}, "needs a Path or a File"},
		{Volume{File: img, Target: "/data"}, "open it read-write"},
	} {
		_, err := New(Config{Image: img, DisableLockdown: true, Volumes: []Volume{c.vol}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New with %+v: %v, want an error mentioning %q", c.vol, err, c.want)
		}
	}
	// An image that cannot be opened is a *VolumeError naming it, with
	// the cause underneath.
	missing := filepath.Join(dir, "missing.ext4")
	_, err = New(Config{Image: img, DisableLockdown: true, Volumes: []Volume{{Path: missing, Target: "/data"}}})
	var ve *VolumeError
	if !errors.As(err, &ve) || ve.Volume != missing || ve.Target != "/data" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("New with a missing volume: %v, want a *VolumeError for %s wrapping ErrNotExist", err, missing)
	}
	// The process may host a sandbox after the failures, here with a
	// volume passed as an open file.
	good := newTestVolume(t, dir, 256<<20)
	f, err := os.OpenFile(good, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t, Config{Volumes: []Volume{{File: f, Target: "/data"}}})
	f.Close()
	if r := startAndWait(t, s, sh("ls /data; echo via-fd > /data/f")); r.stdout != "lost+found\n" {
		t.Errorf("ls /data: %q", r.stdout)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkImageClean(t, good)
	if got := debugfs(t, good, "cat /f"); !strings.Contains(got, "via-fd") {
		t.Errorf("/f written through a volume passed as a file: %q", got)
	}
}

// TestVolumeBadRoot mounts volumes whose root inode debugfs made a regular
// file, or gave no file type at all: New must fail promptly, saying so,
// rather than deadlock releasing the half-made filesystem.
func TestVolumeBadRoot(t *testing.T) {
	if _, err := exec.LookPath("debugfs"); err != nil {
		t.Skipf("debugfs is not installed (apt-get install e2fsprogs): %v", err)
	}
	img, err := os.Open(imagePath)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	dir := volumeDir(t)
	for _, c := range []struct{ name, mode, want string }{
		{"regular file", "0100644", "not a directory (mode 0100644)"},
		{"no file type", "0", "reading the root directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vol := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".ext4")
			if err := ext4lite.Create(vol, 64<<20); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command("debugfs", "-w", "-R", "sif <2> mode "+c.mode, vol).CombinedOutput(); err != nil {
				t.Fatalf("debugfs: %v\n%s", err, out)
			}
			done := make(chan error, 1)
			go func() {
				s, err := New(Config{Image: img, DisableLockdown: true, Volumes: []Volume{{Path: vol, Target: "/data"}}})
				if err == nil {
					s.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "rungv volume check") {
					t.Errorf("New: %v, want an error saying %q and how to check the volume", err, c.want)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("New with a volume whose root is not a directory has not returned after 20s")
			}
		})
	}
}

// TestVolumeClones gives two episodes clones of one golden volume: each
// sees the golden's files and only its own writes, and the golden never
// changes. On this host's filesystem clones are deltas (or reflinks);
// on a loop-mounted XFS file, reflinks.
func TestVolumeClones(t *testing.T) {
	t.Run("host filesystem", func(t *testing.T) { testClones(t, volumeDir(t)) })
	t.Run("xfs reflink", func(t *testing.T) {
		dir := xfsDir(t)
		method := testClones(t, dir)
		if method != "reflink" {
			t.Errorf("clones on XFS used %s, want reflink", method)
		}
	})
}

func testClones(t *testing.T, dir string) string {
	golden := newTestVolume(t, dir, 512<<20)
	s := newSandbox(t, Config{Volumes: []Volume{{Path: golden, Target: "/data"}}})
	startAndWait(t, s, sh("mkdir /data/base && echo golden > /data/base/file && cp /bin/busybox /data/base/busybox"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sum := filehash.SHA256(t, golden)
	var method string
	for _, ep := range []string{"one", "two"} {
		clone := filepath.Join(dir, ep+".ext4")
		m, err := ext4lite.Clone(golden, clone)
		if err != nil {
			t.Fatalf("Clone: %v", err)
		}
		method = m.String()
		s := newSandbox(t, Config{Volumes: []Volume{{Path: clone, Target: "/data"}}})
		r := startAndWait(t, s, sh(`set -e; cat /data/base/file; ls /data; echo `+ep+` > /data/base/file; touch /data/`+ep+`; /data/base/busybox rm /data/base/busybox`))
		if want := "golden\nbase\nlost+found\n"; r.stdout != want || r.status.ExitCode() != 0 {
			t.Errorf("episode %s sees %q (%v %s), want %q", ep, r.stdout, r.status, r.stderr, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := filehash.SHA256(t, golden); got != sum {
			t.Fatalf("episode %s changed the golden image", ep)
		}
	}
	for _, ep := range []string{"one", "two"} {
		clone := filepath.Join(dir, ep+".ext4")
		flat := filepath.Join(dir, ep+".flat.ext4")
		if err := ext4lite.Flatten(clone, flat); err != nil {
			t.Fatal(err)
		}
		checkImageClean(t, flat)
		out := debugfs(t, flat, "ls /")
		if !strings.Contains(out, ep) || strings.Contains(out, map[string]string{"one": "two", "two": "one"}[ep]) {
			t.Errorf("episode %s's volume lists:\n%s", ep, out)
		}
		if f := debugfs(t, flat, "cat /base/file"); !strings.Contains(f, ep) {
			t.Errorf("episode %s's file: %q", ep, f)
		}
	}
	t.Logf("clones made by %s", method)
	return method
}

// xfsDir returns a directory on a fresh loop-mounted XFS file with reflink,
// or skips saying why it cannot.
func xfsDir(t *testing.T) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("loop-mounting XFS needs root")
	}
	dir := volumeDir(t)
	fsImg := filepath.Join(dir, "xfs.img")
	mnt := filepath.Join(dir, "xfs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fsImg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(fsImg, 2<<30); err != nil {
		t.Fatal(err)
	}
	if out, err := runHost("mkfs.xfs", "-q", "-m", "reflink=1", fsImg); err != nil {
		t.Skipf("mkfs.xfs (apt-get install xfsprogs): %v %s", err, out)
	}
	if out, err := runHost("mount", "-o", "loop", fsImg, mnt); err != nil {
		t.Skipf("cannot loop-mount XFS here: %v %s", err, out)
	}
	t.Cleanup(func() { runHost("umount", mnt) })
	if err := os.Chmod(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt
}
