package ext4lite

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
)

// needTool skips the test, saying why, if a host tool is missing.
func needTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	for _, dir := range []string{"/sbin", "/usr/sbin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name)
		}
	}
	t.Skipf("%s not installed (apt-get install e2fsprogs xfsprogs): skipping", name)
	return ""
}

// mustClean fails the test unless e2fsck finds the image clean.
func mustClean(t testing.TB, path string) {
	t.Helper()
	needTool(t, "e2fsck")
	res, err := Check(path)
	if err != nil {
		t.Fatalf("check %s: %v", path, err)
	}
	if !res.Clean {
		t.Fatalf("e2fsck -fn %s: exit %d, problems %q\n%s", path, res.ExitCode, res.Problems, res.Output)
	}
	// ext4lite's own checker must agree.
	dev, err := blockdev.Open(path, true)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	problems, err := Verify(dev)
	if err != nil || len(problems) > 0 {
		t.Fatalf("e2fsck finds %s clean, Verify does not: %q %v", path, problems, err)
	}
}

// mkfsExt4 makes an image with the real mkfs.ext4.
func mkfsExt4(t testing.TB, size string, args ...string) string {
	t.Helper()
	mkfs := needTool(t, "mkfs.ext4")
	path := filepath.Join(t.TempDir(), "mkfs.img")
	if err := exec.Command("truncate", "-s", size, path).Run(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(mkfs, append(append([]string{"-q", "-F", "-b", "4096"}, args...), path)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	return path
}

// debugfs runs a debugfs request on an image.
func debugfs(t testing.TB, path string, write bool, req string) string {
	t.Helper()
	bin := needTool(t, "debugfs")
	args := []string{"-R", req, path}
	if write {
		args = append([]string{"-w"}, args...)
	}
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs %q: %v\n%s", req, err, out)
	}
	return strings.TrimPrefix(string(out), "debugfs 1.47.0 (5-Feb-2023)\n")
}

func openRW(t testing.TB, path string) *FS {
	t.Helper()
	return openWith(t, path, Options{})
}

func openRO(t testing.TB, path string) *FS {
	t.Helper()
	return openWith(t, path, Options{ReadOnly: true})
}

func openWith(t testing.TB, path string, opts Options) *FS {
	t.Helper()
	fs, err := OpenVolume(path, opts)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	// A failing test must not leave the image open (and its mount busy).
	t.Cleanup(func() { fs.Close() })
	return fs
}

var fixedTime = time.Unix(1700000000, 0)

func nowFixed() time.Time { return fixedTime }

func TestMain(m *testing.M) {
	// Fuzzing and tests must see panics, not errors standing for them.
	recoverPanics = false
	os.Exit(m.Run())
}
