package dockerimage

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"gvisor.dev/gvisor/pkg/cleanup"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/flock"
)

// Built is a cached build of the image.
type Built struct {
	// Dir is the build's cache directory.
	Dir string
	// Layout is the OCI layout directory; the image is tagged "latest".
	Layout string
	// Key is the recipe's digest.
	Key string
	// Compose says which Compose the image has: ComposePlugin or
	// ComposeFallback.
	Compose ComposeKind
	// ComposeError is why the plugin could not be built, when Compose is
	// ComposeFallback.
	ComposeError string
}

// ComposeKind says how Compose is run inside the image.
type ComposeKind string

const (
	// ComposePlugin: `docker compose`, the v2 plugin.
	ComposePlugin ComposeKind = "plugin"
	// ComposeFallback: `docker-compose`, Debian's 1.29.
	ComposeFallback ComposeKind = "docker-compose"
)

// Ref is the gvx image reference of the build (`rungv pull REF`).
func (b *Built) Ref() string { return "oci:" + b.Layout + ":latest" }

// ComposeCommand is the command line that runs Compose inside the image.
func (b *Built) ComposeCommand() []string {
	if b.Compose == ComposeFallback {
		return []string{"docker-compose"}
	}
	return []string{"docker", "compose"}
}

// Options tune Build.
type Options struct {
	// CacheDir holds builds and their layers; empty means CacheRoot().
	CacheDir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

// CacheRoot is where builds are cached: $GVX_CACHE/dockerimage, default
// ~/.cache/gvx/dockerimage.
func CacheRoot() string {
	if d := os.Getenv("GVX_CACHE"); d != "" {
		return filepath.Join(d, "dockerimage")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "gvx", "dockerimage")
}

// Cached returns r's build if it is in the cache, without building.
func Cached(r *Recipe, opts Options) (*Built, bool) {
	b := newBuilt(r, opts)
	if err := b.readMeta(); err != nil {
		return nil, false
	}
	return b, true
}

// Build returns r's cached build, building it first if needed (minutes:
// debootstrap and a Go build of Compose). Concurrent builds of the same
// recipe wait for each other.
func Build(ctx context.Context, r *Recipe, opts Options) (*Built, error) {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	b := newBuilt(r, opts)
	if b.readMeta() == nil {
		return b, nil
	}
	root := filepath.Dir(b.Dir)
	if err := os.MkdirAll(filepath.Join(root, "layers"), 0o755); err != nil {
		return nil, err
	}
	// A build takes minutes; another process's wait is bounded anyway.
	lockCtx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	lock, err := flock.Acquire(lockCtx, filepath.Join(root, b.Key+".lock"))
	if err != nil {
		return nil, err
	}
	defer lock.Release()
	if b.readMeta() == nil { // another process built it meanwhile
		return b, nil
	}
	if err := b.build(ctx, r, opts); err != nil {
		return nil, err
	}
	return b, b.readMeta()
}

func newBuilt(r *Recipe, opts Options) *Built {
	root := opts.CacheDir
	if root == "" {
		root = CacheRoot()
	}
	key := r.Key()
	dir := filepath.Join(root, key)
	return &Built{Dir: dir, Layout: filepath.Join(dir, "oci"), Key: key}
}

// meta is the build's record, written last: its presence marks a complete
// build.
type meta struct {
	Key          string
	Compose      ComposeKind
	ComposeError string `json:",omitempty"`
}

func (b *Built) metaPath() string { return filepath.Join(b.Dir, "build.json") }

func (b *Built) readMeta() error {
	data, err := os.ReadFile(b.metaPath())
	if err != nil {
		return err
	}
	var m meta
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("%s: %w (remove %s to rebuild)", b.metaPath(), err, b.Dir)
	}
	b.Compose, b.ComposeError = m.Compose, m.ComposeError
	return nil
}

// build makes the layers that are not cached yet and writes the layout.
func (b *Built) build(ctx context.Context, r *Recipe, opts Options) error {
	root := filepath.Dir(b.Dir)
	work, err := os.MkdirTemp(root, ".work-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	m := meta{Key: b.Key, Compose: ComposePlugin}
	var layers []string
	compose := filepath.Join(root, "layers", r.composeKey()+".tar.gz")
	if err := cachedLayer(compose, func(dst string) error {
		opts.Logf("building the Compose %s plugin from the Go module proxy (once) …", r.ComposeVersion)
		return composeLayer(ctx, r, work, dst)
	}); err != nil {
		opts.Logf("Compose %s could not be built, installing Debian's %v instead: %v", r.ComposeVersion, r.ComposeFallback, err)
		m.Compose, m.ComposeError = ComposeFallback, err.Error()
	}
	var extra []string
	if m.Compose == ComposeFallback {
		extra = r.ComposeFallback
	}
	debian := filepath.Join(root, "layers", r.debianKey(extra)+".tar.gz")
	if err := cachedLayer(debian, func(dst string) error {
		opts.Logf("debootstrapping Debian %s with %v (once, a few minutes) …", r.Suite, append(r.Packages, extra...))
		return debianLayer(ctx, r, extra, work, dst)
	}); err != nil {
		return err
	}
	layers = append(layers, debian)
	if m.Compose == ComposePlugin {
		layers = append(layers, compose)
	}
	gvx := filepath.Join(work, "gvx.tar.gz")
	if err := gvxLayer(r, work, gvx); err != nil {
		return err
	}
	layers = append(layers, gvx)

	img, err := assemble(r, b.Key, m.Compose, layers)
	if err != nil {
		return err
	}
	out := filepath.Join(work, "out")
	p, err := layout.Write(filepath.Join(out, "oci"), empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "build.json"), data, 0o644); err != nil {
		return err
	}
	if err := os.RemoveAll(b.Dir); err != nil {
		return err
	}
	return os.Rename(out, b.Dir)
}

// cachedLayer makes path with make unless it exists; make writes to a
// temporary name that is renamed into place.
func cachedLayer(path string, make func(dst string) error) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	tmp := path + ".tmp"
	defer os.Remove(tmp)
	if err := make(tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// debianLayer debootstraps r into a tree under work and writes it as a
// layer.
func debianLayer(ctx context.Context, r *Recipe, extra []string, work, dst string) error {
	tree := filepath.Join(work, "debian")
	cu := cleanup.Make(func() { os.RemoveAll(tree) })
	defer cu.Clean()
	if err := debootstrap(ctx, r, extra, tree, filepath.Join(work, "..", "debootstrap.log")); err != nil {
		return err
	}
	return writeLayer(tree, dst, false)
}

// composeLayer builds the Compose plugin and writes a layer holding it.
func composeLayer(ctx context.Context, r *Recipe, work, dst string) error {
	tree := filepath.Join(work, "compose")
	defer os.RemoveAll(tree)
	bin := filepath.Join(tree, ComposePluginPath)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	if err := buildCompose(ctx, r, work, bin, filepath.Join(work, "..", "compose-build.log")); err != nil {
		return err
	}
	return writeLayer(tree, dst, true)
}

// gvxLayer writes the layer of gvx's own files: the entrypoint and the
// snapshot hook.
func gvxLayer(r *Recipe, work, dst string) error {
	tree := filepath.Join(work, "gvx")
	defer os.RemoveAll(tree)
	for path, content := range map[string]string{EntrypointPath: r.Entrypoint, SnapshotHookPath: r.SnapshotHook} {
		script := filepath.Join(tree, path)
		if err := os.MkdirAll(filepath.Dir(script), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(script, []byte(content), 0o755); err != nil {
			return err
		}
		// WriteFile's mode is subject to the umask.
		if err := os.Chmod(script, 0o755); err != nil {
			return err
		}
	}
	return writeLayer(tree, dst, true)
}

// assemble makes the image from layer files, bottom first.
func assemble(r *Recipe, key string, compose ComposeKind, layerFiles []string) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, path := range layerFiles {
		l, err := tarball.LayerFromFile(path, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("reading layer %s: %w", path, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l,
			History: v1.History{Created: v1.Time{Time: Epoch}, CreatedBy: "gvx dockerimage: " + filepath.Base(path)},
		})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: Epoch}
	cf.Config = v1.Config{
		Entrypoint:   []string{EntrypointPath},
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", DockerPort): {}},
		Labels: map[string]string{
			"org.opencontainers.image.title": "gvx Docker-in-gVisor (Debian " + r.Suite + ")",
			"dev.gfire.gvx.dockerimage.key":  key,
			"dev.gfire.gvx.compose":          string(compose),
			image.SnapshotHookLabel:          SnapshotHookPath,
			image.NeedsLabel:                 r.Needs,
		},
	}
	return mutate.ConfigFile(img, cf)
}
