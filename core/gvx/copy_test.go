package gvx

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"z.gfire.dev/gvx/core/spec"
)

func TestUploadAndDownloadDir(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	src := t.TempDir()
	big := make([]byte, 2<<20+3)
	rand.Read(big)
	mtime := time.Date(2023, 1, 2, 3, 4, 5, 0, time.UTC)
	for name, data := range map[string][]byte{"README": []byte("hi\n"), "pkg/mod.py": []byte("x = 1\n"), "pkg/data/big.bin": big, "run.sh": []byte("#!/bin/sh\necho ran\n")} {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, mtime, mtime)
	}
	os.Chmod(filepath.Join(src, "run.sh"), 0o755)
	os.Symlink("pkg/mod.py", filepath.Join(src, "mod-link"))

	res, err := sb.UploadDir(ctx, src, "/workspace/repo", CopyOptions{})
	if err != nil {
		t.Fatalf("UploadDir: %v", err)
	}
	if res.Entries != 8 || res.Bytes != int64(3+6+len(big)+19) {
		t.Errorf("UploadDir moved %+v", res)
	}
	got := sh(t, sb, `cd /workspace/repo && ./run.sh && readlink mod-link && cat mod-link && stat -c '%n %u %a %Y' README run.sh && wc -c < pkg/data/big.bin`, nil)
	want := "ran\npkg/mod.py\nx = 1\n" + "README 0 644 1672628645\nrun.sh 0 755 1672628645\n" + "2097155\n"
	if string(got.Stdout) != want {
		t.Fatalf("the guest sees:\n%s\nwant:\n%s\n%s", got.Stdout, want, got.Stderr)
	}

	// The agent changes the tree; the host takes it back.
	sh(t, sb, `cd /workspace/repo && echo changed > README && mkdir -p out && echo result > out/r.txt && chmod 4755 run.sh`, nil)
	dst := filepath.Join(t.TempDir(), "back")
	if _, err := sb.DownloadDir(ctx, "/workspace/repo", dst); err != nil {
		t.Fatalf("DownloadDir: %v", err)
	}
	for name, want := range map[string]string{"README": "changed\n", "out/r.txt": "result\n", "mod-link": "x = 1\n"} {
		if b, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q %v", name, b, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "pkg/data/big.bin")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("big.bin came back with %d bytes, %v", len(b), err)
	}
	if target, err := os.Readlink(filepath.Join(dst, "mod-link")); err != nil || target != "pkg/mod.py" {
		t.Errorf("mod-link: %q %v", target, err)
	}
	if st, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || st.Mode().Perm() != 0o755 || st.Mode()&os.ModeSetuid != 0 {
		t.Errorf("run.sh on the host: %v %v (the set-user-ID bit must not come along)", st.Mode(), err)
	}

	// A single file comes back whole, over a symlink without following it.
	hostFile := filepath.Join(t.TempDir(), "run.sh")
	os.Symlink(filepath.Join(src, "README"), hostFile)
	if err := sb.DownloadFile(ctx, "/workspace/repo/run.sh", hostFile); err != nil {
		t.Fatalf("DownloadFile: %v", err)
	}
	if b, err := os.ReadFile(hostFile); err != nil || string(b) != "#!/bin/sh\necho ran\n" {
		t.Errorf("downloaded file: %q %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(src, "README")); string(b) != "hi\n" {
		t.Errorf("DownloadFile wrote through a symlink: %q", b)
	}
	if err := sb.DownloadFile(ctx, "/workspace/repo/pkg", hostFile); err == nil {
		t.Errorf("DownloadFile of a directory succeeded")
	}

	if _, err := sb.UploadDir(ctx, filepath.Join(src, "README"), "/x", CopyOptions{}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("UploadDir of a file: %v", err)
	}
	if _, err := sb.DownloadDir(ctx, "/etc/passwd", t.TempDir()); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("DownloadDir of a file: %v", err)
	}
	if _, err := sb.DownloadDir(ctx, "/no/such", t.TempDir()); !IsCode(err, CodeNotFound) {
		t.Errorf("DownloadDir of a missing directory: %v", err)
	}
}

// TestDownloadStaysInItsDirectory: whatever the guest's symlinks say,
// nothing is written outside the host directory.
func TestDownloadStaysInItsDirectory(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("untouched\n"), 0o644)
	// The guest prepares links aimed at the host's paths.
	sh(t, sb, `mkdir -p /evil/d && ln -s `+outside+` /evil/out && ln -s `+victim+` /evil/v && echo owned > /evil/d/f`, nil)
	dst := t.TempDir()
	if _, err := sb.DownloadDir(ctx, "/evil", dst); err != nil {
		t.Fatalf("DownloadDir: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched\n" {
		t.Errorf("the victim outside was changed: %q", b)
	}
	// A second download over the first replaces the links; it must not
	// write through them.
	sh(t, sb, `rm /evil/v && echo replaced > /evil/v`, nil)
	if _, err := sb.DownloadDir(ctx, "/evil", dst); err != nil {
		t.Fatalf("second DownloadDir: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "untouched\n" {
		t.Errorf("the victim outside was written through a link: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "v")); string(b) != "replaced\n" {
		t.Errorf("v in the download: %q", b)
	}
}

// TestFileOwners gives written and uploaded files to users named as an
// exec's user is, resolved against the image's /etc/passwd and /etc/group.
func TestFileOwners(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	for owner, want := range map[string]string{
		"":              "0:0",
		"nobody":        "65534:65534",
		"nobody:root":   "65534:0",
		"1000":          "1000:0", // a uid the image does not list: group 0, as docker's --user
		"1000:1000":     "1000:1000",
		"65534:nogroup": "65534:65534",
	} {
		name := "/tmp/owned-by-" + strings.ReplaceAll(owner, ":", "-")
		info, err := sb.WriteFile(ctx, name, strings.NewReader("x"), WriteOptions{Mode: 0o640, Owner: owner})
		if err != nil {
			t.Errorf("WriteFile owner %q: %v", owner, err)
			continue
		}
		if got := fmt.Sprintf("%d:%d", info.UID, info.GID); got != want || info.Mode&0o7777 != 0o640 {
			t.Errorf("owner %q: the file is %s, mode %#o; want %s, 0640", owner, got, info.Mode&0o7777, want)
		}
	}
	for owner, want := range map[string]string{
		"ghost":         `user "ghost" is not in the image's /etc/passwd`,
		"nobody:ghosts": `group "ghosts" is not in the image's /etc/group`,
	} {
		_, err := sb.WriteFile(ctx, "/tmp/ghost", strings.NewReader("x"), WriteOptions{Owner: owner})
		if !IsCode(err, CodeInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("owner %q: %v, want an invalid argument saying %q", owner, err, want)
		}
	}
	if _, err := sb.Stat(ctx, "/tmp/ghost"); !IsCode(err, CodeNotFound) {
		t.Errorf("a write for an unknown owner made the file: %v", err)
	}

	// A tree, and the directories made for it and for a file.
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "pkg"), 0o755)
	os.WriteFile(filepath.Join(src, "pkg", "mod.py"), []byte("x = 1\n"), 0o644)
	os.Symlink("pkg/mod.py", filepath.Join(src, "link"))
	if _, err := sb.UploadDir(ctx, src, "/home/agent/repo", CopyOptions{Owner: "nobody"}); err != nil {
		t.Fatalf("UploadDir: %v", err)
	}
	if _, err := sb.WriteFile(ctx, "/home/agent/notes/todo", strings.NewReader("x"), WriteOptions{MakeParents: true, Owner: "nobody"}); err != nil {
		t.Fatalf("WriteFile MakeParents: %v", err)
	}
	got := sh(t, sb, `cd /home && stat -c '%n %u:%g' agent agent/repo agent/repo/pkg agent/repo/pkg/mod.py agent/repo/link agent/notes agent/notes/todo && ls -ln agent/repo | tail -n +2 | awk '{print $3":"$4, $NF}'`, nil)
	want := "agent 65534:65534\nagent/repo 65534:65534\nagent/repo/pkg 65534:65534\nagent/repo/pkg/mod.py 65534:65534\nagent/repo/link 65534:65534\nagent/notes 65534:65534\nagent/notes/todo 65534:65534\n" +
		"65534:65534 pkg/mod.py\n65534:65534 pkg\n"
	if string(got.Stdout) != want {
		t.Errorf("the guest sees:\n%s\nwant:\n%s%s", got.Stdout, want, got.Stderr)
	}
	// The user can work on what it was given.
	if res := sh(t, sb, `echo y = 2 >> /home/agent/repo/pkg/mod.py && touch /home/agent/repo/new`, &ExecOptions{Exec: spec.Exec{User: "nobody"}}); res.ExitCode != 0 {
		t.Errorf("nobody changing its tree: %d %s", res.ExitCode, res.Stderr)
	}
}

// countingWriter counts what is written to it.
type countingWriter struct{ n int64 }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// hostStat returns the host file p's stat, not following a symlink.
func hostStat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

// TestCopyKeepsLinksHolesAndTimes: what `docker cp` keeps, upload and
// download keep: a hard-link pair stays one file, a 50 MiB file with
// holes travels as its data and stays sparse (on a volume, whose blocks
// show it, and out of tmpfs), a symlink and a directory keep their times,
// a set-user-ID bit goes in (and, for the host's sake, not out).
func TestCopyKeepsLinksHolesAndTimes(t *testing.T) {
	cfg := config()
	cfg.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: filepath.Join(t.TempDir(), "data.ext4"), Target: "/data"}}
	sb := newSandbox(t, cfg)
	ctx := context.Background()
	const size = 50 << 20
	mtime := time.Date(2022, 3, 4, 5, 6, 7, 0, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(mtime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}

	src := t.TempDir()
	os.Mkdir(filepath.Join(src, "d"), 0o750)
	os.WriteFile(filepath.Join(src, "d", "a"), []byte("alpha\n"), 0o644)
	if err := os.Link(filepath.Join(src, "d", "a"), filepath.Join(src, "b")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "suid"), []byte("#!/bin/sh\n"), 0o755)
	os.Chmod(filepath.Join(src, "suid"), 0o755|os.ModeSetuid)
	f, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.WriteAt([]byte("one"), 1<<20)
	f.WriteAt([]byte("two"), 30<<20)
	f.Close()
	want, _ := os.ReadFile(filepath.Join(src, "sparse"))
	os.Symlink("d/a", filepath.Join(src, "l"))
	for _, name := range []string{"l", "d", "sparse"} {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(src, name), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}

	var sent countingWriter
	if err := tarHostDir(src, &sent); err != nil {
		t.Fatal(err)
	}
	if sent.n > 1<<20 {
		t.Errorf("an upload of 50 MiB with 8 KiB of data sends %d bytes", sent.n)
	}
	if _, err := sb.UploadDir(ctx, src, "/data/t", CopyOptions{}); err != nil {
		t.Fatalf("UploadDir: %v", err)
	}
	got := sh(t, sb, `cd /data/t && stat -c '%i %h' d/a b && stat -c '%n %Y' l d sparse && stat -c '%a' suid && stat -c '%b' sparse && md5sum < sparse && cp -a /data/t /tmp/t`, nil)
	lines := strings.Split(string(got.Stdout), "\n")
	wantGuest := fmt.Sprintf("%s\n%[1]s\nl %[2]d\nd %[2]d\nsparse %[2]d\n4755\n", strings.Fields(lines[0])[0]+" 2", mtime.Unix())
	if len(lines) < 7 || strings.Join(lines[:6], "\n")+"\n" != wantGuest || !strings.HasSuffix(lines[0], " 2") {
		t.Errorf("the guest sees:\n%s\nwant:\n%s(and few blocks for sparse)\n%s", got.Stdout, wantGuest, got.Stderr)
	}
	if len(lines) > 6 {
		if b, _ := strconv.Atoi(lines[6]); b == 0 || b > 64 {
			t.Errorf("the 50 MiB sparse file has %s blocks in the guest, want its holes kept", lines[6])
		}
	}

	var back countingWriter
	if _, err := sb.CopyOut(ctx, "/data/t", &back); err != nil {
		t.Fatal(err)
	}
	if back.n > 1<<20 {
		t.Errorf("a download of 50 MiB with 8 KiB of data sends %d bytes", back.n)
	}
	for _, guestDir := range []string{"/data/t", "/tmp/t"} {
		dst := t.TempDir()
		if _, err := sb.DownloadDir(ctx, guestDir, dst); err != nil {
			t.Fatalf("DownloadDir %s: %v", guestDir, err)
		}
		a, b := hostStat(t, filepath.Join(dst, "d", "a")), hostStat(t, filepath.Join(dst, "b"))
		if a.Ino != b.Ino || a.Nlink != 2 {
			t.Errorf("%s: d/a and b came back as inodes %d and %d (links %d), want one file", guestDir, a.Ino, b.Ino, a.Nlink)
		}
		if got, _ := os.ReadFile(filepath.Join(dst, "sparse")); !bytes.Equal(got, want) {
			t.Errorf("%s: the sparse file came back different", guestDir)
		}
		if st := hostStat(t, filepath.Join(dst, "sparse")); st.Blocks > 64 {
			t.Errorf("%s: the 50 MiB sparse file came back with %d blocks, want its holes kept", guestDir, st.Blocks)
		}
		if st := hostStat(t, filepath.Join(dst, "suid")); st.Mode&0o7777 != 0o755 {
			t.Errorf("%s: suid came back with mode %#o, want 0755 (no set-user-ID on the host)", guestDir, st.Mode&0o7777)
		}
		if guestDir == "/tmp/t" {
			continue // busybox cp -a does not keep a symlink's time
		}
		for _, name := range []string{"l", "d", "sparse"} {
			if fi, err := os.Lstat(filepath.Join(dst, name)); err != nil || !fi.ModTime().Equal(mtime) {
				t.Errorf("%s: %s came back with time %v, want %v", guestDir, name, fi.ModTime(), mtime)
			}
		}
	}
}

// TestDownloadHardLinkOutsideTree: a guest file linked into the
// downloaded tree from outside it comes back as a file of the tree; a
// hard link in the archive to anything the archive did not bring (a
// file already in the destination, linked to one outside it) is refused.
func TestDownloadHardLinkOutsideTree(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	sh(t, sb, `echo secret > /outside && mkdir -p /g/sub && ln /outside /g/sub/a && ln /outside /g/b`, nil)
	dst := t.TempDir()
	if _, err := sb.DownloadDir(ctx, "/g/sub", dst); err != nil {
		t.Fatalf("DownloadDir: %v", err)
	}
	if entries, _ := os.ReadDir(dst); len(entries) != 1 {
		t.Errorf("the download holds %d entries, want a alone", len(entries))
	}
	if st := hostStat(t, filepath.Join(dst, "a")); st.Nlink != 1 || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		t.Errorf("a came back with %d links, mode %#o", st.Nlink, st.Mode)
	}

	// An archive no sandbox writes, with the links a broken one might.
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	os.WriteFile(victim, []byte("host secret\n"), 0o600)
	dst = t.TempDir()
	if err := os.Link(victim, filepath.Join(dst, "pre")); err != nil {
		t.Fatal(err)
	}
	os.Symlink(outside, filepath.Join(dst, "out"))
	for _, linkname := range []string{"top/pre", "top/out/victim", "top/../victim", "top/missing"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "top/", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.WriteHeader(&tar.Header{Name: "top/stolen", Typeflag: tar.TypeLink, Linkname: linkname})
		tw.Close()
		if err := extractHostTar(&buf, dst); err == nil {
			t.Errorf("a hard link to %s was extracted", linkname)
		}
		if st := hostStat(t, victim); st.Nlink != 2 {
			t.Errorf("after a hard link to %s the victim outside has %d links, want 2", linkname, st.Nlink)
		}
		os.Remove(filepath.Join(dst, "stolen"))
	}
}

// TestUploadChoosesFileOrDirectory: Upload copies a host file to a guest
// file, with the host file's permission bits or opts.Mode, and a host
// directory's contents into a guest directory, both owned as opts.Owner
// says; what it cannot copy is an invalid argument, and nothing is
// written.
func TestUploadChoosesFileOrDirectory(t *testing.T) {
	sb := newSandbox(t, config())
	ctx := context.Background()
	src := t.TempDir()
	file := filepath.Join(src, "task.sh")
	if err := os.WriteFile(file, []byte("#!/bin/sh\necho task\n"), 0o751); err != nil {
		t.Fatal(err)
	}
	os.Chmod(file, 0o751) // whatever the umask
	tree := filepath.Join(src, "tree")
	os.MkdirAll(filepath.Join(tree, "pkg"), 0o755)
	if err := os.WriteFile(filepath.Join(tree, "pkg", "mod.py"), []byte("x = 1\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(tree, "pkg", "mod.py"), 0o640)

	if err := sb.Upload(ctx, file, "/tmp/task.sh", UploadOptions{}); err != nil {
		t.Fatalf("Upload of a file: %v", err)
	}
	mode := fs.FileMode(0o600)
	if err := sb.Upload(ctx, file, "/tmp/task-600.sh", UploadOptions{Mode: &mode, Owner: "65534"}); err != nil {
		t.Fatalf("Upload of a file with a mode and an owner: %v", err)
	}
	if err := sb.Upload(ctx, tree, "/work/tree", UploadOptions{Owner: "65534:65534"}); err != nil {
		t.Fatalf("Upload of a directory: %v", err)
	}
	got := sh(t, sb, `/tmp/task.sh && stat -c '%n %u %a' /tmp/task.sh /tmp/task-600.sh /work/tree /work/tree/pkg/mod.py && cat /work/tree/pkg/mod.py`, nil)
	want := "task\n/tmp/task.sh 0 751\n/tmp/task-600.sh 65534 600\n/work/tree 65534 755\n/work/tree/pkg/mod.py 65534 640\nx = 1\n"
	if string(got.Stdout) != want {
		t.Fatalf("the guest sees:\n%s\nwant:\n%s\n%s", got.Stdout, want, got.Stderr)
	}

	big := fs.FileMode(0o17777)
	for _, c := range []struct {
		host string
		opts UploadOptions
		want string
	}{
		{tree, UploadOptions{Mode: &mode}, "is a directory, whose files keep their own"},
		{file, UploadOptions{Mode: &big}, "mode 017777 has bits beyond the permission bits"},
		{filepath.Join(src, "absent"), UploadOptions{}, "no such file or directory"},
		{"/dev/null", UploadOptions{}, "host file /dev/null is not a regular file"},
		{"/proc/self/mem", UploadOptions{}, "host file /proc/self/mem could not be read, so nothing was written"},
	} {
		err := sb.Upload(ctx, c.host, "/tmp/refused", c.opts)
		if !IsCode(err, CodeInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Upload of %s %+v: %v; want an invalid argument saying %q", c.host, c.opts, err, c.want)
		}
	}
	// WriteFile refuses a mode with bits beyond 07777, where the sandbox
	// would mask them.
	if _, err := sb.WriteFile(ctx, "/tmp/refused", strings.NewReader("x"), WriteOptions{Mode: 0o10644}); !IsCode(err, CodeInvalid) {
		t.Errorf("WriteFile of mode 010644: %v; want an invalid argument", err)
	}
	if _, err := sb.Stat(ctx, "/tmp/refused"); !IsCode(err, CodeNotFound) {
		t.Errorf("a refused upload left /tmp/refused: %v", err)
	}
}
