package sentry

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/core/internal/treecheck"
)

var (
	fstoolOnce sync.Once
	fstoolBin  string
	fstoolErr  error
)

// fstool returns the path of the static helper in
// core/sentry/internal/fstool, built once per test binary. Tests that
// need it skip under the hostile harness, which cannot run the Go
// toolchain.
func fstool(t *testing.T) string {
	t.Helper()
	if os.Getenv(hostileEnv) != "" {
		t.Skip("needs the Go toolchain to build fstool; covered by the privileged run")
	}
	fstoolOnce.Do(func() {
		dir, err := tempDir("fstool")
		if err != nil {
			fstoolErr = err
			return
		}
		fstoolBin = filepath.Join(dir, "fstool")
		cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", fstoolBin, "z.gfire.dev/gvx/core/sentry/internal/fstool")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fstoolErr = &buildError{err: err, out: string(out)}
		}
	})
	if fstoolErr != nil {
		t.Fatalf("building fstool: %v", fstoolErr)
	}
	return fstoolBin
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// installFstool copies fstool to /tmp/fstool in the sandbox.
func installFstool(t *testing.T, s *Sandbox) {
	t.Helper()
	data, err := os.ReadFile(fstool(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFile(context.Background(), "/tmp/fstool", data, 0o755); err != nil {
		t.Fatalf("copying fstool into the sandbox: %v", err)
	}
}

// newTestVolume creates an empty volume of size bytes.
func newTestVolume(t *testing.T, dir string, size int64) string {
	t.Helper()
	img := filepath.Join(dir, "volume.ext4")
	if err := ext4lite.Create(img, size); err != nil {
		t.Fatalf("creating a volume: %v", err)
	}
	return img
}

// volumeDir makes a directory for volume images that uid 65534 can use.
func volumeDir(t *testing.T) string {
	t.Helper()
	dir, err := tempDir("volume")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// checkImageClean runs the real e2fsck on img: it must exit 0, suggest no
// fix, warn about nothing, and the image must not need recovery.
func checkImageClean(t *testing.T, img string) {
	t.Helper()
	if _, err := exec.LookPath("e2fsck"); err != nil {
		t.Skipf("e2fsck is not installed (apt-get install e2fsprogs): %v", err)
	}
	out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput()
	if err != nil {
		t.Errorf("e2fsck -fn %s: %v\n%s", img, err, out)
	}
	for _, bad := range []string{"Fix?", "WARNING", "Clear?", "Salvage?"} {
		if bytes.Contains(out, []byte(bad)) {
			t.Errorf("e2fsck -fn %s says %q:\n%s", img, bad, out)
		}
	}
	hdr, err := exec.Command("dumpe2fs", "-h", img).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs -h %s: %v\n%s", img, err, hdr)
	}
	if bytes.Contains(hdr, []byte("needs_recovery")) {
		t.Errorf("%s needs recovery after a graceful close", img)
	}
}

// debugfs runs one debugfs request against img (read-only).
func debugfs(t *testing.T, img, request string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", request, img).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs -R %q: %v\n%s", request, err, out)
	}
	return string(out)
}

// guestListing lists dir inside s with fstool.
func guestListing(t *testing.T, s *Sandbox, dir string) (treecheck.Listing, map[string]map[string]string) {
	t.Helper()
	l := runJSON[treecheck.Listing](t, s, "list", dir)
	x := runJSON[map[string]map[string]string](t, s, "xattrs", dir)
	return l, x
}

func runJSON[T any](t *testing.T, s *Sandbox, cmd, dir string) T {
	t.Helper()
	r := execAndWait(t, s, ProcessSpec{Argv: []string{"/tmp/fstool", cmd, dir}})
	if r.status.ExitCode() != 0 {
		t.Fatalf("fstool %s %s: %v\n%s", cmd, dir, r.status, r.stderr)
	}
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("fstool %s output: %v", cmd, err)
	}
	return v
}

// hostListing lists a host directory with the same code as the guest.
func hostListing(t *testing.T, dir string) (treecheck.Listing, map[string]map[string]string) {
	t.Helper()
	var l treecheck.Listing
	var x map[string]map[string]string
	for _, c := range []struct {
		cmd string
		v   any
	}{{"list", &l}, {"xattrs", &x}} {
		out, err := exec.Command(fstool(t), c.cmd, dir).Output()
		if err != nil {
			t.Fatalf("fstool %s %s on the host: %v", c.cmd, dir, err)
		}
		if err := json.Unmarshal(out, c.v); err != nil {
			t.Fatal(err)
		}
	}
	return l, x
}

// diffXattrs compares attribute maps.
func diffXattrs(want, got map[string]map[string]string) []string {
	var out []string
	for p, w := range want {
		for n, v := range w {
			if g, ok := got[p][n]; !ok || g != v {
				out = append(out, p+": "+n+" differs or is missing")
			}
		}
	}
	for p, g := range got {
		for n := range g {
			if _, ok := want[p][n]; !ok {
				out = append(out, p+": unexpected "+n)
			}
		}
	}
	return out
}

// mustRun runs a guest shell script as init and fails on a non-zero exit.
func mustRun(t *testing.T, s *Sandbox, script string) string {
	t.Helper()
	r := execAndWait(t, s, sh(script))
	if r.status.ExitCode() != 0 {
		t.Fatalf("script failed: %v\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
	}
	return r.stdout
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// runHost runs a host command and returns its combined output.
func runHost(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
