package dockerimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tree makes a small tree with every entry type writeLayer handles.
func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\necho tool\n"), 0o755))
	// os.Chmod would drop the setuid and sticky bits of a plain number.
	must(unix.Chmod(filepath.Join(root, "usr/bin/tool"), 0o4755))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool-again")))
	must(os.Symlink("tool", filepath.Join(root, "usr/bin/tool-link")))
	must(os.MkdirAll(filepath.Join(root, "tmp"), 0o1777))
	must(unix.Chmod(filepath.Join(root, "tmp"), 0o1777))
	must(os.WriteFile(filepath.Join(root, "etc"), []byte("file\n"), 0o600))
	// A time after Epoch is clamped; one before it is kept.
	old := time.Date(2020, 5, 1, 12, 0, 0, 0, time.UTC)
	must(os.Chtimes(filepath.Join(root, "etc"), old, old))
	return root
}

func readLayer(t *testing.T, path string) []*tar.Header {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var hdrs []*tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hdrs
		}
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, h)
	}
}

func TestWriteLayer(t *testing.T) {
	root := tree(t)
	a, b := filepath.Join(t.TempDir(), "a.tar.gz"), filepath.Join(t.TempDir(), "b.tar.gz")
	if err := writeLayer(root, a, false); err != nil {
		t.Fatal(err)
	}
	// Touching every file changes nothing in the output.
	now := time.Now()
	filepath.Walk(root, func(p string, _ os.FileInfo, _ error) error { os.Chtimes(p, now, now); return nil })
	os.Chtimes(filepath.Join(root, "etc"), time.Date(2020, 5, 1, 12, 0, 0, 0, time.UTC), time.Date(2020, 5, 1, 12, 0, 0, 0, time.UTC))
	if err := writeLayer(root, b, false); err != nil {
		t.Fatal(err)
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if !bytes.Equal(da, db) {
		t.Error("two layers of the same tree differ")
	}

	var got []string
	for _, h := range readLayer(t, a) {
		line := h.Name + " " + string(h.Typeflag) + " " + h.Linkname
		got = append(got, strings.TrimSpace(line))
		switch h.Name {
		case "etc":
			if !h.ModTime.Equal(time.Date(2020, 5, 1, 12, 0, 0, 0, time.UTC)) || h.Mode != 0o600 {
				t.Errorf("etc: mtime %v mode %o, want the file's own 2020 time and 0600", h.ModTime, h.Mode)
			}
		case "usr/bin/tool":
			if !h.ModTime.Equal(Epoch) || h.Mode != 0o4755 {
				t.Errorf("tool: mtime %v mode %o, want Epoch and 04755", h.ModTime, h.Mode)
			}
		case "tmp/":
			if h.Mode != 0o1777 {
				t.Errorf("tmp: mode %o, want 1777", h.Mode)
			}
		}
		if h.Uname != "" || h.Gname != "" {
			t.Errorf("%s has owner names %q:%q; layers carry numeric owners only", h.Name, h.Uname, h.Gname)
		}
	}
	want := []string{
		"etc 0", "tmp/ 5", "usr/ 5", "usr/bin/ 5",
		"usr/bin/tool 0", "usr/bin/tool-again 1 usr/bin/tool", "usr/bin/tool-link 2 tool",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWriteLayerRootOwned(t *testing.T) {
	root := tree(t)
	if err := os.Lchown(filepath.Join(root, "etc"), 1234, 5678); err != nil {
		t.Skipf("cannot chown here (%v); root ownership needs a file owned by someone else", err)
	}
	dst := filepath.Join(t.TempDir(), "l.tar.gz")
	for _, rootOwned := range []bool{false, true} {
		if err := writeLayer(root, dst, rootOwned); err != nil {
			t.Fatal(err)
		}
		for _, h := range readLayer(t, dst) {
			if h.Name != "etc" {
				continue
			}
			want := 1234
			if rootOwned {
				want = 0
			}
			if h.Uid != want || (rootOwned && h.Gid != 0) {
				t.Errorf("rootOwned=%v: etc is %d:%d", rootOwned, h.Uid, h.Gid)
			}
		}
	}
}

func TestPrune(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"usr/share/doc/docker.io/copyright":      "license\n",
		"usr/share/doc/docker.io/README.gz":      "readme",
		"usr/share/man/man1/docker.1.gz":         "man",
		"usr/share/locale/de/LC_MESSAGES/x.mo":   "mo",
		"usr/share/locale/locale.alias":          "alias",
		"var/cache/apt/archives/docker.io_1.deb": "deb",
		"var/lib/apt/lists/deb.debian.org_x":     "list",
		"var/log/dpkg.log":                       "log",
		"dev/null":                               "not a device here",
		"etc/hostname":                           "buildhost\n",
		"etc/resolv.conf":                        "nameserver 10.255.255.53\n",
		"usr/sbin/dockerd":                       "kept",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := prune(root); err != nil {
		t.Fatal(err)
	}
	for name, kept := range map[string]bool{
		"usr/share/doc/docker.io/copyright": true, "usr/share/doc/docker.io/README.gz": false,
		"usr/share/man/man1/docker.1.gz": false, "usr/share/locale/de": false, "usr/share/locale/locale.alias": true,
		"var/cache/apt/archives/docker.io_1.deb": false, "var/lib/apt/lists/deb.debian.org_x": false,
		"var/log/dpkg.log": false, "dev/null": false, "dev": true, "etc/hostname": false, "usr/sbin/dockerd": true,
	} {
		if _, err := os.Lstat(filepath.Join(root, name)); (err == nil) != kept {
			t.Errorf("%s: kept=%v, want %v", name, err == nil, kept)
		}
	}
	if data, err := os.ReadFile(filepath.Join(root, "etc/resolv.conf")); err != nil || len(data) != 0 {
		t.Errorf("etc/resolv.conf: %q %v, want the build host's resolver gone", data, err)
	}
}

func TestEntrypointScript(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	if out, err := exec.Command(sh, "-n", "-c", entrypointScript).CombinedOutput(); err != nil {
		t.Fatalf("the entrypoint does not parse: %v\n%s", err, out)
	}
	for _, want := range []string{"cpu cpuacct cpuset memory devices pids", "--storage-driver overlay2", "-H fd://", "pack_sockaddr_in(2375, INADDR_ANY)", "unix:///var/run/docker.sock"} {
		if !strings.Contains(entrypointScript, want) {
			t.Errorf("the entrypoint lacks %q", want)
		}
	}
}
