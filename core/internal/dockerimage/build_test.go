package dockerimage

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"z.gfire.dev/gvx/core/image"
)

// fakeLayers puts tiny Debian and Compose layers into cache, as earlier
// builds would have left them, so Build runs neither debootstrap nor Go.
func fakeLayers(t *testing.T, cache string, r *Recipe) {
	t.Helper()
	layers := filepath.Join(cache, "layers")
	if err := os.MkdirAll(layers, 0o755); err != nil {
		t.Fatal(err)
	}
	for key, file := range map[string]string{r.debianKey(nil): "usr/sbin/dockerd", r.composeKey(): ComposePluginPath} {
		tree := t.TempDir()
		p := filepath.Join(tree, file)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(key), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := writeLayer(tree, filepath.Join(layers, key+".tar.gz"), true); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBuildFromCachedLayers(t *testing.T) {
	cache := t.TempDir()
	r := Default()
	fakeLayers(t, cache, r)
	if _, ok := Cached(r, Options{CacheDir: cache}); ok {
		t.Fatal("Cached found a build in an empty cache")
	}
	b, err := Build(context.Background(), r, Options{CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if b.Compose != ComposePlugin || len(b.ComposeCommand()) != 2 {
		t.Errorf("compose %q %v, want the plugin", b.Compose, b.ComposeCommand())
	}
	idx, err := layout.ImageIndexFromPath(b.Layout)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "latest" {
		t.Fatalf("layout index %+v, want one image tagged latest", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 3 {
		t.Errorf("%d layers, want Debian, Compose and gvx's", len(layers))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != EntrypointPath {
		t.Errorf("entrypoint %q, want %s", cf.Config.Entrypoint, EntrypointPath)
	}
	if _, ok := cf.Config.ExposedPorts["2375/tcp"]; !ok {
		t.Errorf("exposed ports %v lack 2375/tcp", cf.Config.ExposedPorts)
	}
	// `rungv run IMAGE` reads it and turns on what dockerd needs.
	if got := cf.Config.Labels[image.NeedsLabel]; got != "nftables,net-raw" {
		t.Errorf("label %s=%q, want nftables,net-raw", image.NeedsLabel, got)
	}
	if got, ok := Cached(r, Options{CacheDir: cache}); !ok || got.Layout != b.Layout {
		t.Errorf("Cached after Build: %+v %v", got, ok)
	}

	// The same recipe builds the same image: rebuilding gives the same
	// manifest digest.
	first := im.Manifests[0].Digest
	if err := os.RemoveAll(b.Dir); err != nil {
		t.Fatal(err)
	}
	again, err := Build(context.Background(), r, Options{CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	idx2, _ := layout.ImageIndexFromPath(again.Layout)
	im2, _ := idx2.IndexManifest()
	if im2.Manifests[0].Digest != first {
		t.Errorf("rebuilding the same recipe gave %s, then %s", first, im2.Manifests[0].Digest)
	}

	// A new entrypoint is a new recipe: a new build, reusing the Debian
	// and Compose layers (this test has no debootstrap to fall back on).
	r2 := Default()
	r2.Entrypoint += "# changed\n"
	if r2.Key() == r.Key() {
		t.Fatal("changing the entrypoint kept the recipe's key")
	}
	b2, err := Build(context.Background(), r2, Options{CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if b2.Layout == b.Layout {
		t.Error("a changed recipe reused the old layout")
	}
}

func TestRecipeKey(t *testing.T) {
	base := Default().Key()
	if Default().Key() != base {
		t.Fatal("the same recipe has two keys")
	}
	for name, change := range map[string]func(*Recipe){
		"suite":    func(r *Recipe) { r.Suite = "trixie" },
		"packages": func(r *Recipe) { r.Packages = append(r.Packages, "git") },
		"compose":  func(r *Recipe) { r.ComposeVersion = "v2.28.1" },
		"needs":    func(r *Recipe) { r.Needs = "nftables" },
	} {
		r := Default()
		change(r)
		if r.Key() == base {
			t.Errorf("changing the %s kept the key", name)
		}
	}
	// The mirror is not part of the recipe.
	t.Setenv("GVX_DEBIAN_MIRROR", "http://mirror.example/debian")
	if Default().Key() != base {
		t.Error("the mirror changed the key")
	}
}
