package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// copyTree makes a small host tree: a file with its own mode and time, a
// nested file, a symlink and a hard link.
func copyTree(t *testing.T) (string, time.Time) {
	t.Helper()
	src := t.TempDir()
	mtime := time.Unix(1_600_000_000, 0)
	for name, content := range map[string]string{"a.txt": "alpha\n", "sub/b.txt": "beta\n"} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(filepath.Join(src, "a.txt"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub/b.txt", filepath.Join(src, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(src, "a.txt"), filepath.Join(src, "sub/a-link")); err != nil {
		t.Fatal(err)
	}
	return src, mtime
}

// TestRunCopy: --copy HOSTDIR:GUESTDIR puts the tree in place before the
// command starts, as the SDK's upload copies one: modes, times, symlinks
// and hard links kept, missing directories made, the files the command's
// user's; several copies land in order.
func TestRunCopy(t *testing.T) {
	img := testImage(t)
	src, mtime := copyTree(t)
	script := `cd /work/deep && cat a.txt sub/b.txt && readlink l && stat -c '%a %u:%g %Y %h' a.txt && stat -c '%i' a.txt sub/a-link | uniq | wc -l && stat -c '%u' /work`
	out, errOut, code := runCLI(t, "", "run", "-q", "--copy", src+":/work/deep", img, "sh", "-c", script)
	want := "alpha\nbeta\nsub/b.txt\n640 0:0 " + strconv.FormatInt(mtime.Unix(), 10) + " 2\n1\n0\n"
	if code != 0 || out != want {
		t.Fatalf("exit %d, stdout %q, want %q (stderr %s)", code, out, want, errOut)
	}

	out, errOut, code = runCLI(t, "", "run", "-q", "-u", "1000:1000", "--copy", src+":/work/deep", img, "sh", "-c", `stat -c '%u:%g' /work /work/deep/sub/b.txt && echo changed > /work/deep/a.txt && cat /work/deep/a.txt`)
	if want := "1000:1000\n1000:1000\nchanged\n"; code != 0 || out != want {
		t.Errorf("-u 1000:1000: exit %d, stdout %q, want %q (stderr %s)", code, out, want, errOut)
	}

	second := t.TempDir()
	if err := os.WriteFile(filepath.Join(second, "a.txt"), []byte("second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLI(t, "", "run", "-q", "--copy", src+":/w", "--copy", second+":/w", img, "cat", "/w/a.txt", "/w/sub/b.txt")
	if want := "second\nbeta\n"; code != 0 || out != want {
		t.Errorf("two copies: exit %d, stdout %q, want %q (stderr %s)", code, out, want, errOut)
	}
}

// TestRunCopyStaysInTheSandbox: guest state, here a volume an earlier run
// filled with symlinks to a host directory, cannot steer the copy out of
// the sandbox: every path resolves in the guest, where the copy lands.
func TestRunCopyStaysInTheSandbox(t *testing.T) {
	img := testImage(t)
	src, _ := copyTree(t)
	target := t.TempDir() // what the links name, on the host: must stay empty
	vol := filepath.Join(t.TempDir(), "v.ext4")
	mount := "type=volume,src=" + vol + ",dst=/v"
	if _, errOut, code := runCLI(t, "", "run", "-q", "--mount", mount, img, "sh", "-c", "ln -s / /v/abs && ln -s ../../../../.. /v/up"); code != 0 {
		t.Fatalf("planting the links: exit %d: %s", code, errOut)
	}
	out, errOut, code := runCLI(t, "", "run", "-q", "--mount", mount, "--copy", src+":/v/abs"+target+"/in", "--copy", src+":/v/up"+target+"/in2", img,
		"cat", target+"/in/a.txt", target+"/in2/sub/b.txt")
	if code != 0 || out != "alpha\nbeta\n" {
		t.Errorf("exit %d, stdout %q; want the copies at the links' guest paths (stderr %s)", code, out, errOut)
	}
	if entries, err := os.ReadDir(target); err != nil || len(entries) > 0 {
		t.Errorf("the host directory the guest's links name holds %v (%v); the copy must stay in the sandbox", entries, err)
	}
}

// TestRunCopyRefusals: a --copy that cannot work fails at once, naming the
// flag and what to give, and a command whose copy failed does not run.
func TestRunCopyRefusals(t *testing.T) {
	img := testImage(t)
	src, _ := copyTree(t)
	dir := t.TempDir()
	file := filepath.Join(src, "a.txt")
	snap := filepath.Join(dir, "snap")
	if err := os.WriteFile(snap, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := []string{"sh", "-c", "echo ran"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--copy", filepath.Join(dir, "missing") + ":/w"}, "does not exist; give one that does"},
		{[]string{"--copy", file + ":/w"}, "is a file, not a directory: give a directory"},
		{[]string{"--copy", src}, "names no guest directory; write HOSTDIR:GUESTDIR"},
		{[]string{"--copy", src + ":w"}, "is not an absolute path in the sandbox"},
		{[]string{"--copy", src + ":/w", "--restore", snap, img}, "a restored sandbox starts none: drop --copy"},
		// After the boot: the guest's /bin/sh is a file.
		{[]string{"--copy", src + ":/bin/sh/x"}, "not a directory; nothing ran"},
	} {
		args := append([]string{"run", "-q"}, c.args...)
		if args[len(args)-1] != img {
			args = append(append(args, img), cmd...)
		}
		start := time.Now()
		out, errOut, code := runCLI(t, "", args...)
		if code == 0 || out != "" || !strings.Contains(errOut, "--copy") || !strings.Contains(errOut, c.want) {
			t.Errorf("rungv %q: exit %d, stdout %q, stderr %q; want a failure saying %q", args, code, out, errOut, c.want)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("rungv %q took %v to fail", args, took)
		}
	}
}
