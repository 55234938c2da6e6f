// Package testimage builds the images gvx tests run on, from Debian's
// busybox-static, with no network: a three-layer image exercising whiteouts,
// opaque directories, symlinks, hard links (within and across layers),
// setuid/setgid bits, a fifo, a character device and xattrs.
//
// The build is deterministic and cached under $GVX_CACHE/testimages (default
// ~/.cache/gvx/testimages), keyed by the busybox binary and this package's
// recipe version. The same image is written as an OCI layout and as a
// `docker save` tarball.
package testimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// recipeVersion changes whenever the layers below change, so cached builds
// of an older recipe are not reused.
const recipeVersion = "7"

// BusyboxPath is where Debian's busybox-static installs the binary.
const BusyboxPath = "/bin/busybox"

// Tag is the name the image carries in the OCI layout and the archive.
const Tag = "gvx.test/busybox:latest"

// Entry is one tar entry of a layer spec.
type Entry struct {
	Name     string
	Type     byte // a tar.Type* flag
	Mode     int64
	UID, GID int
	Content  []byte
	Linkname string
	Devmajor int64
	Devminor int64
	Xattrs   map[string]string
	Mtime    time.Time
}

// Applets are the busybox symlinks the base layer installs.
var Applets = []string{
	"sh", "ash", "cat", "chmod", "cp", "date", "dd", "echo", "env", "false",
	"grep", "head", "hostname", "id", "kill", "ln", "ls", "mkdir", "mount",
	"mv", "ps", "pwd", "readlink", "rm", "sed", "seq", "sleep", "sort",
	"stat", "tail", "tee", "test", "touch", "true", "uname", "wc", "yes",
	// Network tools (core/netstack's tests).
	"arping", "httpd", "ip", "nc", "nslookup", "ping", "unshare", "wget",
}

var epoch = time.Unix(1700000000, 0)

func at(sec int64, nsec int64) time.Time {
	return epoch.Add(time.Duration(sec)*time.Second + time.Duration(nsec))
}

// capability is a VFS_CAP_REVISION_2 security.capability value granting
// CAP_NET_RAW (bit 13), effective.
var capability = string([]byte{
	0x01, 0x00, 0x00, 0x02, // magic_etc: revision 2 | effective
	0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, // permitted[0], inheritable[0]
	0, 0, 0, 0, 0, 0, 0, 0, // permitted[1], inheritable[1]
})

func dir(name string, mode int64, t time.Time) Entry {
	return Entry{Name: name + "/", Type: tar.TypeDir, Mode: mode, Mtime: t}
}

func file(name string, mode int64, content string, t time.Time) Entry {
	return Entry{Name: name, Type: tar.TypeReg, Mode: mode, Content: []byte(content), Mtime: t}
}

// BaseLayer is a minimal busybox root filesystem: the binary, its applets,
// users and the usual directories. On its own it is gvx's default image.
func BaseLayer(busybox []byte) []Entry {
	base := []Entry{
		{Name: "./", Type: tar.TypeDir, Mode: 0o755, Mtime: at(0, 1)},
		dir("bin", 0o755, at(1, 0)),
		{Name: "bin/busybox", Type: tar.TypeReg, Mode: 0o755, Content: busybox, Mtime: at(2, 123456789)},
	}
	for i, a := range Applets {
		base = append(base, Entry{Name: "bin/" + a, Type: tar.TypeSymlink, Mode: 0o777, Linkname: "busybox", Mtime: at(3, int64(i))})
	}
	return append(base,
		dir("etc", 0o755, at(4, 0)),
		file("etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", at(5, 0)),
		file("etc/group", 0o644, "root:x:0:\nnogroup:x:65534:\n", at(5, 1)),
		file("etc/motd", 0o644, "base layer\n", at(5, 2)),
		dir("tmp", 0o1777, at(6, 0)),
		dir("root", 0o700, at(6, 1)),
		dir("var", 0o755, at(8, 0)),
	)
}

// Layers returns the test image's layer specs, bottom first, with
// busybox's bytes as the binary's content.
func Layers(busybox []byte) [][]Entry {
	base := append(BaseLayer(busybox),
		file("etc/deleteme", 0o600, "a whiteout in layer 2 removes me\n", at(5, 3)),
		dir("opt", 0o755, at(7, 0)),
		dir("opt/old", 0o755, at(7, 1)),
		file("opt/old/a", 0o644, "hidden by the opaque marker\n", at(7, 2)),
		dir("opt/old/sub", 0o755, at(7, 3)),
		file("opt/old/sub/b", 0o644, "hidden too\n", at(7, 4)),
		dir("var/cache", 0o755, at(8, 1)),
		dir("var/cache/apt", 0o755, at(8, 2)),
		file("var/cache/apt/pkgcache.bin", 0o644, "whited out as a directory in layer 3\n", at(8, 3)),
		dir("srv", 0o755, at(9, 0)),
		dir("srv/data", 0o750, at(9, 1)),
		file("srv/data/inside", 0o640, "replaced by a file in layer 3\n", at(9, 2)),
	)
	tools := []Entry{
		{Name: "etc/.wh.deleteme", Type: tar.TypeReg, Mode: 0o600, Mtime: at(20, 0)},
		dir("opt/old", 0o711, at(21, 0)),
		{Name: "opt/old/.wh..wh..opq", Type: tar.TypeReg, Mode: 0o600, Mtime: at(21, 1)},
		file("opt/old/new", 0o644, "the only entry of the opaque directory\n", at(21, 2)),
		dir("usr", 0o755, at(22, 0)),
		dir("usr/bin", 0o755, at(22, 1)),
		file("usr/bin/hello", 0o755, "#!/bin/sh\necho hello from gvx\n", at(22, 2)),
		{Name: "usr/bin/hello-again", Type: tar.TypeLink, Linkname: "usr/bin/hello", Mode: 0o755, Mtime: at(22, 2)},
		file("usr/bin/suid", 0o4755, "#!/bin/sh\nid -u\n", at(22, 3)),
		dir("usr/share", 0o755, at(22, 4)),
		dir("usr/share/shared", 0o2775, at(22, 5)),
		{Name: "usr/bin/netcap", Type: tar.TypeReg, Mode: 0o755, Content: []byte("#!/bin/sh\n"), Mtime: at(22, 6),
			Xattrs: map[string]string{"security.capability": capability}},
		{Name: "usr/share/tagged", Type: tar.TypeReg, Mode: 0o644, Content: []byte("x\n"), Mtime: at(22, 7),
			Xattrs: map[string]string{"user.gvx.origin": "testimage", "trusted.gvx": "1"}},
		{Name: "var/fifo", Type: tar.TypeFifo, Mode: 0o644, Mtime: at(23, 0)},
		{Name: "var/null", Type: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3, Mtime: at(23, 1)},
		{Name: "var/disk", Type: tar.TypeBlock, Mode: 0o660, UID: 0, GID: 6, Devmajor: 8, Devminor: 300, Mtime: at(23, 2)},
		{Name: "home/user/owned", Type: tar.TypeReg, Mode: 0o640, UID: 1000, GID: 70000, Content: []byte("mine\n"), Mtime: at(24, 0)},
	}
	top := []Entry{
		file("etc/motd", 0o644, "top layer\n", at(30, 0)),
		{Name: "var/cache/.wh.apt", Type: tar.TypeReg, Mode: 0o600, Mtime: at(31, 0)},
		file("srv/data", 0o644, "a file where a directory was\n", at(32, 0)),
		{Name: "bin/busybox-hard", Type: tar.TypeLink, Linkname: "bin/busybox", Mtime: at(33, 0)},
		{Name: "usr/bin/hello-link", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "/usr/bin/hello", Mtime: at(34, 0)},
		dir("empty", 0o755, at(35, 0)),
		file("empty-file", 0o644, "", at(35, 1)),
	}
	return [][]Entry{base, tools, top}
}

// TarLayer renders a layer spec as an uncompressed PAX tar.
func TarLayer(entries []Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:     e.Name,
			Typeflag: e.Type,
			Mode:     e.Mode,
			Uid:      e.UID,
			Gid:      e.GID,
			Linkname: e.Linkname,
			Devmajor: e.Devmajor,
			Devminor: e.Devminor,
			ModTime:  e.Mtime,
			Format:   tar.FormatPAX,
		}
		if e.Type == tar.TypeReg {
			hdr.Size = int64(len(e.Content))
		}
		if len(e.Xattrs) > 0 {
			hdr.PAXRecords = make(map[string]string)
			for k, v := range e.Xattrs {
				hdr.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("entry %q: %w", e.Name, err)
		}
		if _, err := tw.Write(e.Content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Image builds the v1.Image from layer specs: gzip OCI layers, an OCI
// manifest and config with a fixed creation time.
func Image(specs [][]Entry) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, spec := range specs {
		raw, err := TarLayer(spec)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(raw)), nil
		}, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, err
		}
		if img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l,
			History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: fmt.Sprintf("gvx testimage layer %d", i+1)},
		}); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		Cmd:          []string{"/bin/sh"},
		Env:          []string{"PATH=/usr/bin:/bin", "HOME=/root", "GVX_TEST=1"},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		Volumes:      map[string]struct{}{"/data": {}},
		Labels:       map[string]string{"org.opencontainers.image.title": "gvx test busybox"},
	}
	return mutate.ConfigFile(img, cf)
}

// Built is a cached build of the test image.
type Built struct {
	Dir     string // cache directory of this build
	Layout  string // OCI layout directory
	Archive string // docker save tarball
	Specs   [][]Entry
}

// LayoutRef and ArchiveRef return gvx references to the built image.
func (b *Built) LayoutRef() string  { return "oci:" + b.Layout + ":latest" }
func (b *Built) ArchiveRef() string { return "docker-archive:" + b.Archive + ":" + Tag }

// CacheRoot is the directory builds are cached in.
func CacheRoot() string {
	if d := os.Getenv("GVX_CACHE"); d != "" {
		return filepath.Join(d, "testimages")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "gvx", "testimages")
}

// Build returns the cached test image, building it first if needed.
func Build() (*Built, error) {
	busybox, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w (install Debian's busybox-static: apt-get install busybox-static; `make test` does this)", BusyboxPath, err)
	}
	sum := sha256.Sum256(busybox)
	key := "busybox-" + hex.EncodeToString(sum[:6]) + "-r" + recipeVersion
	specs := Layers(busybox)
	dir := filepath.Join(CacheRoot(), key)
	b := &Built{Dir: dir, Layout: filepath.Join(dir, "oci"), Archive: filepath.Join(dir, "docker.tar"), Specs: specs}
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return b, nil
	}
	if err := os.MkdirAll(CacheRoot(), 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(CacheRoot(), ".build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	img, err := Image(specs)
	if err != nil {
		return nil, err
	}
	if err := writeOutputs(img, tmp); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), nil, 0o644); err != nil {
		return nil, err
	}
	// Another process may have finished the same build first; its result
	// is identical.
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "complete")); statErr != nil {
			return nil, fmt.Errorf("publishing the test image build: %w", err)
		}
	}
	return b, nil
}

// WriteLayout writes img as an OCI layout in dir, tagged latest: the
// reference "oci:DIR:latest".
func WriteLayout(img v1.Image, dir string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"}))
}

func writeOutputs(img v1.Image, dir string) error {
	if err := WriteLayout(img, filepath.Join(dir, "oci")); err != nil {
		return err
	}
	tag, err := name.NewTag(Tag)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(filepath.Join(dir, "docker.tar"), tag, img)
}

// DefaultTag names the default image in docker archives.
const DefaultTag = "gvx.test/default:latest"

// WriteDefault writes gvx's default image — the test image's base layer:
// busybox, its applets, /etc/passwd and a few directories — as an OCI
// layout in dir, replacing what is there, and, if archive is not empty, as
// a docker archive tagged DefaultTag.
func WriteDefault(dir, archive string) error {
	busybox, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return fmt.Errorf("reading %s: %w (install Debian's busybox-static: apt-get install busybox-static)", BusyboxPath, err)
	}
	img, err := Image([][]Entry{BaseLayer(busybox)})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := WriteLayout(img, dir); err != nil {
		return err
	}
	if archive == "" {
		return nil
	}
	tag, err := name.NewTag(DefaultTag)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(archive, tag, img)
}
