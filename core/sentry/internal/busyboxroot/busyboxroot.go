// Package busyboxroot builds small EROFS root filesystems for the sentry tests
// from the host's static busybox (Debian's busybox-static package).
//
// The image is written with core/erofs, so the tests exercise the same
// writer that produces real images from OCI layers.
package busyboxroot

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"z.gfire.dev/gvx/core/erofs"
	"z.gfire.dev/gvx/core/fstree"
)

// BusyboxPath is where Debian's busybox-static installs the static binary.
const BusyboxPath = "/bin/busybox"

// Passwd is the /etc/passwd of the image.
const Passwd = `root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
`

// Group is the /etc/group of the image.
const Group = `root:x:0:
user:x:1000:
nogroup:x:65534:
`

// Marker is the content of /etc/gvx-marker, a file tests read to prove that
// they see the image.
const Marker = "gvx test image\n"

// Options add content to the image.
type Options struct {
	// Files maps absolute guest paths to the content of extra regular files
	// (mode 0644, owned by root). Parent directories must exist in the base
	// image.
	Files map[string][]byte
}

// Available reports why busybox images cannot be built on this host, or ""
// if they can.
func Available() string {
	out, err := exec.Command("file", "-L", BusyboxPath).Output()
	if err != nil {
		// `file` may be missing; fall back to checking that busybox runs.
		if err := exec.Command(BusyboxPath, "true").Run(); err != nil {
			return fmt.Sprintf("%s does not run (install busybox-static): %v", BusyboxPath, err)
		}
		return ""
	}
	if !bytes.Contains(out, []byte("statically linked")) {
		return fmt.Sprintf("%s is not statically linked (install busybox-static)", BusyboxPath)
	}
	return ""
}

// Build writes a busybox root filesystem image to path. Every file in it is
// world-readable so an unprivileged process can open it.
func Build(path string, opts Options) error {
	applets, err := listApplets()
	if err != nil {
		return err
	}
	bb, err := os.Open(BusyboxPath)
	if err != nil {
		return fmt.Errorf("opening %s (install busybox-static): %w", BusyboxPath, err)
	}
	defer bb.Close()
	st, err := bb.Stat()
	if err != nil {
		return fmt.Errorf("stat %s: %w", BusyboxPath, err)
	}

	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("creating image %s: %w", path, err)
	}
	defer f.Close()
	w := erofs.NewWriter(f)
	b := &builder{w: w, root: dir(0o755, 0)}

	for _, d := range []struct {
		path string
		perm uint32
		uid  uint32
	}{
		{"bin", 0o755, 0}, {"dev", 0o755, 0}, {"etc", 0o755, 0},
		{"home", 0o755, 0}, {"home/user", 0o755, 1000}, {"proc", 0o555, 0},
		{"root", 0o700, 0}, {"run", 0o755, 0}, {"sys", 0o555, 0},
		{"tmp", 0o1777, 0}, {"usr", 0o755, 0}, {"var", 0o755, 0},
		{"mnt", 0o755, 0},
	} {
		b.mkdir(d.path, d.perm, d.uid)
	}
	b.symlink("sbin", "bin")
	b.symlink("usr/bin", "../bin")
	b.symlink("usr/sbin", "../bin")

	if err := b.file("bin/busybox", 0o755, bb, st.Size()); err != nil {
		return err
	}
	for _, a := range applets {
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		b.symlink("bin/"+a, "busybox")
	}
	for name, data := range map[string]string{
		"etc/passwd":     Passwd,
		"etc/group":      Group,
		"etc/gvx-marker": Marker,
		"etc/hostname":   "image\n",
	} {
		if err := b.bytes(name, []byte(data)); err != nil {
			return err
		}
	}
	for name, data := range opts.Files {
		if err := b.bytes(strings.TrimPrefix(name, "/"), data); err != nil {
			return err
		}
	}
	// geteuid exits with its effective uid; the set-user-ID copy tests
	// Config.AllowSUID.
	elf := GeteuidELF()
	if err := b.file("bin/geteuid", 0o755, bytes.NewReader(elf), int64(len(elf))); err != nil {
		return err
	}
	if err := b.file("bin/suid-geteuid", 0o4755, bytes.NewReader(elf), int64(len(elf))); err != nil {
		return err
	}
	if b.err != nil {
		return b.err
	}
	if _, err := w.Finish(b.root, erofs.Options{VolumeName: "gvx-test"}); err != nil {
		return fmt.Errorf("finishing image %s: %w", path, err)
	}
	return nil
}

// BuildTemp builds an image in dir and returns its path.
func BuildTemp(dir string, opts Options) (string, error) {
	path := filepath.Join(dir, "busybox.erofs")
	return path, Build(path, opts)
}

func listApplets() ([]string, error) {
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("listing busybox applets (install busybox-static): %w", err)
	}
	return strings.Fields(string(out)), nil
}

type builder struct {
	w    *erofs.Writer
	root *fstree.Node
	err  error
}

func dir(perm, uid uint32) *fstree.Node {
	n := fstree.NewDir(perm)
	n.UID, n.GID = uid, uid
	n.Mtime = fstree.Timespec{Sec: 1700000000}
	return n
}

func (b *builder) put(path string, n *fstree.Node) {
	parentPath, name := filepath.Split(path)
	parent := fstree.Lookup(b.root, parentPath)
	if parent == nil || !parent.IsDir() {
		if b.err == nil {
			b.err = fmt.Errorf("test image: no directory for %q", path)
		}
		return
	}
	parent.Children[name] = n
}

func (b *builder) mkdir(path string, perm, uid uint32) {
	b.put(path, dir(perm, uid))
}

func (b *builder) symlink(path, target string) {
	b.put(path, &fstree.Node{Mode: fstree.TypeSymlink | 0o777, Target: target, Mtime: fstree.Timespec{Sec: 1700000000}})
}

func (b *builder) file(path string, perm uint32, r io.Reader, size int64) error {
	h, err := b.w.AddFile(r, size)
	if err != nil {
		return fmt.Errorf("test image: adding %q: %w", path, err)
	}
	b.put(path, &fstree.Node{Mode: fstree.TypeRegular | perm, Size: size, Data: h, Mtime: fstree.Timespec{Sec: 1700000000}})
	return nil
}

func (b *builder) bytes(path string, data []byte) error {
	return b.file(path, 0o644, bytes.NewReader(data), int64(len(data)))
}
