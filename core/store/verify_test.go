package store

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/testimage"
)

// insecure lets pulls use the plain-HTTP registry on 127.0.0.1.
var insecure = image.Options{Insecure: true}

// testLayout is a writable copy of the test image's OCI layout.
type testLayout struct {
	t   *testing.T
	dir string
}

func copyLayout(t *testing.T, b *testimage.Built) *testLayout {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "oci")
	if out, err := exec.Command("cp", "-a", b.Layout, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	return &testLayout{t: t, dir: dst}
}

func (l *testLayout) blobPath(h v1.Hash) string {
	return filepath.Join(l.dir, "blobs", h.Algorithm, h.Hex)
}

func (l *testLayout) read(h v1.Hash) []byte {
	b, err := os.ReadFile(l.blobPath(h))
	if err != nil {
		l.t.Fatal(err)
	}
	return b
}

// overwrite replaces blob h's content in place: same file name.
func (l *testLayout) overwrite(h v1.Hash, b []byte) {
	if err := os.WriteFile(l.blobPath(h), b, 0o644); err != nil {
		l.t.Fatal(err)
	}
}

// add stores b as a new, correctly named blob.
func (l *testLayout) add(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	h := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if err := os.WriteFile(l.blobPath(h), b, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return h
}

func (l *testLayout) index() *v1.IndexManifest {
	b, err := os.ReadFile(filepath.Join(l.dir, "index.json"))
	if err != nil {
		l.t.Fatal(err)
	}
	im, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		l.t.Fatal(err)
	}
	return im
}

func (l *testLayout) setIndex(im *v1.IndexManifest) {
	b, err := json.Marshal(im)
	if err != nil {
		l.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, "index.json"), b, 0o644); err != nil {
		l.t.Fatal(err)
	}
}

// image returns the index.json entry of the test image and its manifest.
func (l *testLayout) image() (v1.Descriptor, *v1.Manifest) {
	d := l.index().Manifests[0]
	m, err := v1.ParseManifest(bytes.NewReader(l.read(d.Digest)))
	if err != nil {
		l.t.Fatal(err)
	}
	return d, m
}

// setManifest stores m as a new blob and points index.json at it, with
// the right digest and size: a consistent layout whose manifest says what
// m says.
func (l *testLayout) setManifest(m *v1.Manifest) v1.Descriptor {
	b, err := json.Marshal(m)
	if err != nil {
		l.t.Fatal(err)
	}
	return l.setRawManifest(b)
}

func (l *testLayout) setRawManifest(b []byte) v1.Descriptor {
	im := l.index()
	im.Manifests[0].Digest = l.add(b)
	im.Manifests[0].Size = int64(len(b))
	l.setIndex(im)
	return im.Manifests[0]
}

// nest puts the test image's manifest behind an image index blob, as a
// multi-platform image is stored, and returns the index's descriptor.
func (l *testLayout) nest() v1.Descriptor {
	im := l.index()
	child := im.Manifests[0]
	child.Annotations = nil
	child.Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
	b, err := json.Marshal(&v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{child}})
	if err != nil {
		l.t.Fatal(err)
	}
	d := v1.Descriptor{MediaType: types.OCIImageIndex, Digest: l.add(b), Size: int64(len(b)), Annotations: im.Manifests[0].Annotations}
	im.Manifests = []v1.Descriptor{d}
	l.setIndex(im)
	return d
}

// replaceOnce replaces old with new in b, failing the test if old is not
// there exactly once.
func replaceOnce(t *testing.T, b []byte, old, new string) []byte {
	t.Helper()
	if n := bytes.Count(b, []byte(old)); n != 1 {
		t.Fatalf("%q occurs %d times in %s", old, n, b)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}

// gzipTar returns a gzip layer holding one file.
func gzipTar(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tw, content)
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func diffID(t *testing.T, gz []byte) v1.Hash {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := v1.SHA256(zr)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// wantPullError pulls ref into a new store and checks that it fails with an
// error that says every one of want, and that nothing was cached.
func wantPullError(t *testing.T, ref string, want ...string) {
	t.Helper()
	s := newStore(t)
	img, err := s.Pull(context.Background(), ref, PullOptions{Options: insecure})
	if err == nil {
		t.Fatalf("pull of %s succeeded (environment %q); want an error saying %q", ref, img.Config.Env, want)
	}
	t.Logf("error: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\ndoes not say %q", err, w)
		}
	}
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Errorf("a pull that failed cached %d images", len(imgs))
	}
	if entries, _ := os.ReadDir(filepath.Join(s.Root(), tmpDir)); len(entries) != 0 {
		t.Errorf("tmp/ not empty after a failed pull: %v", entries)
	}
}

// blobNamed is what an error about one blob must say: its kind, the digest
// that names it, and where it was read.
func blobNamed(kind string, h v1.Hash, source string) []string {
	return []string{fmt.Sprintf("the %s blob %s (%s)", kind, h, source)}
}

// TestPullVerifiesLayoutBlobs overwrites, in place, each kind of blob of an
// OCI layout — index, manifest, config, layer — with other content and with
// content of the same length, and pulls it by tag and by pinned digest:
// every pull fails with an error naming the blob.
func TestPullVerifiesLayoutBlobs(t *testing.T) {
	b := buildTestImage(t)
	type tamper struct {
		name string
		// change returns the new content of the blob, given the old.
		change func(t *testing.T, old []byte) []byte
	}
	jsonTampers := func(kind string) []tamper {
		if kind == "config" {
			return []tamper{
				{"other content", func(t *testing.T, old []byte) []byte {
					return replaceOnce(t, old, `"GVX_TEST=1"`, `"GVX_TEST=1","EVIL=1"`)
				}},
				{"same length", func(t *testing.T, old []byte) []byte { return replaceOnce(t, old, "GVX_TEST=1", "GVX_TEST=2") }},
			}
		}
		return []tamper{
			{"other content", func(t *testing.T, old []byte) []byte {
				return replaceOnce(t, old, `"schemaVersion":2`, `"schemaVersion":2,"annotations":{"evil":"1"}`)
			}},
			{"same length", func(t *testing.T, old []byte) []byte {
				return replaceOnce(t, old, `"schemaVersion":2`, `"schemaVersion":3`)
			}},
		}
	}
	layerTampers := []tamper{
		{"other content", func(t *testing.T, old []byte) []byte { return gzipTar(t, "evil", "#!/bin/sh\n") }},
		{"same length", func(t *testing.T, old []byte) []byte {
			b := bytes.Clone(old)
			b[len(b)/2] ^= 0xff
			return b
		}},
	}
	cases := []struct {
		kind    string
		nested  bool
		tampers []tamper
		// blob picks the blob to tamper with, given the top descriptor
		// in index.json, the manifest's digest and the manifest.
		blob func(top v1.Descriptor, manifest v1.Hash, m *v1.Manifest) v1.Hash
	}{
		{"index", true, jsonTampers("index"), func(top v1.Descriptor, _ v1.Hash, _ *v1.Manifest) v1.Hash { return top.Digest }},
		{"manifest", false, jsonTampers("manifest"), func(_ v1.Descriptor, mh v1.Hash, _ *v1.Manifest) v1.Hash { return mh }},
		{"manifest", true, jsonTampers("manifest"), func(_ v1.Descriptor, mh v1.Hash, _ *v1.Manifest) v1.Hash { return mh }},
		{"config", false, jsonTampers("config"), func(_ v1.Descriptor, _ v1.Hash, m *v1.Manifest) v1.Hash { return m.Config.Digest }},
		{"layer", false, layerTampers, func(_ v1.Descriptor, _ v1.Hash, m *v1.Manifest) v1.Hash { return m.Layers[0].Digest }},
	}
	for _, c := range cases {
		for _, tm := range c.tampers {
			for _, pinned := range []bool{false, true} {
				name := c.kind + "/" + tm.name
				if c.nested {
					name += "/nested"
				}
				if pinned {
					name += "/pinned"
				}
				t.Run(name, func(t *testing.T) {
					l := copyLayout(t, b)
					top, m := l.image()
					manifest := top.Digest
					if c.nested {
						top = l.nest()
					}
					h := c.blob(top, manifest, m)
					l.overwrite(h, tm.change(t, l.read(h)))
					ref := "oci:" + l.dir + ":latest"
					if pinned {
						ref = "oci:" + l.dir + "@" + top.Digest.String()
					}
					wantPullError(t, ref, blobNamed(c.kind, h, l.blobPath(h))...)
				})
			}
		}
	}

	// The fault as found: a manifest pinned by digest, its config and a
	// layer overwritten in place with a consistent pair, the config
	// naming the new layer's diff_id and adding to the environment.
	t.Run("config and layer replaced together", func(t *testing.T) {
		l := copyLayout(t, b)
		top, m := l.image()
		evil := gzipTar(t, "bin/evil", "#!/bin/sh\necho pwned\n")
		cfg := l.read(m.Config.Digest)
		var cf v1.ConfigFile
		if err := json.Unmarshal(cfg, &cf); err != nil {
			t.Fatal(err)
		}
		last := len(m.Layers) - 1
		cf.RootFS.DiffIDs[last] = diffID(t, evil)
		cf.Config.Env = append(cf.Config.Env, "EVIL=1")
		newCfg, err := json.Marshal(&cf)
		if err != nil {
			t.Fatal(err)
		}
		l.overwrite(m.Config.Digest, newCfg)
		l.overwrite(m.Layers[last].Digest, evil)
		wantPullError(t, "oci:"+l.dir+"@"+top.Digest.String(), blobNamed("config", m.Config.Digest, l.blobPath(m.Config.Digest))...)
	})
}

// TestPullVerifiesDescriptorSizes pulls consistent layouts whose
// descriptors give sizes other than their blobs': each is refused, naming
// the blob, and an absurd size allocates nothing like it.
func TestPullVerifiesDescriptorSizes(t *testing.T) {
	b := buildTestImage(t)
	const absurd = int64(1) << 62
	cases := []struct {
		name string
		// edit changes the layout; it returns the blob the error must
		// name and what it must say about it.
		edit func(l *testLayout) (kind string, h v1.Hash, says string)
	}{
		{"layer one byte longer", func(l *testLayout) (string, v1.Hash, string) {
			_, m := l.image()
			m.Layers[0].Size++
			l.setManifest(m)
			return "layer", m.Layers[0].Digest, fmt.Sprintf("it is %d bytes long, but its descriptor gives %d", m.Layers[0].Size-1, m.Layers[0].Size)
		}},
		{"layer absurdly long", func(l *testLayout) (string, v1.Hash, string) {
			_, m := l.image()
			m.Layers[1].Size = absurd
			l.setManifest(m)
			return "layer", m.Layers[1].Digest, fmt.Sprintf("but its descriptor gives %d", absurd)
		}},
		{"layer negative", func(l *testLayout) (string, v1.Hash, string) {
			_, m := l.image()
			m.Layers[2].Size = -1
			l.setManifest(m)
			return "layer", m.Layers[2].Digest, "the size -1"
		}},
		{"config one byte shorter", func(l *testLayout) (string, v1.Hash, string) {
			_, m := l.image()
			m.Config.Size--
			l.setManifest(m)
			return "config", m.Config.Digest, fmt.Sprintf("it is longer than the %d bytes its descriptor gives", m.Config.Size)
		}},
		{"config absurdly long", func(l *testLayout) (string, v1.Hash, string) {
			_, m := l.image()
			m.Config.Size = absurd
			l.setManifest(m)
			return "config", m.Config.Digest, fmt.Sprintf("its descriptor gives %d bytes", absurd)
		}},
		{"layer without a digest", func(l *testLayout) (string, v1.Hash, string) {
			_, m := l.image()
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			d := l.setRawManifest(replaceOnce(t, b, `,"digest":"`+m.Layers[0].Digest.String()+`"`, ""))
			return "manifest", d.Digest, "it lists a blob with no digest"
		}},
		{"manifest one byte longer in index.json", func(l *testLayout) (string, v1.Hash, string) {
			im := l.index()
			im.Manifests[0].Size++
			l.setIndex(im)
			return "manifest", im.Manifests[0].Digest, fmt.Sprintf("it is %d bytes long, but its descriptor gives %d", im.Manifests[0].Size-1, im.Manifests[0].Size)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := copyLayout(t, b)
			kind, h, says := c.edit(l)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			wantPullError(t, "oci:"+l.dir+":latest", append(blobNamed(kind, h, l.blobPath(h)), says)...)
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 256<<20 {
				t.Errorf("the pull allocated %d MiB", grew>>20)
			}
		})
	}
}

// TestPullRefusesTamperedCachedImage pulls an image pinned by digest, then
// overwrites its manifest or config in place: pulling the reference again
// fails instead of serving the cache or converting the replacement.
func TestPullRefusesTamperedCachedImage(t *testing.T) {
	b := buildTestImage(t)
	for _, kind := range []string{"manifest", "config"} {
		t.Run(kind, func(t *testing.T) {
			l := copyLayout(t, b)
			top, m := l.image()
			ref := "oci:" + l.dir + "@" + top.Digest.String()
			s := newStore(t)
			ctx := context.Background()
			first, err := s.Pull(ctx, ref, PullOptions{})
			if err != nil {
				t.Fatal(err)
			}
			h := m.Config.Digest
			if kind == "manifest" {
				h = top.Digest
			}
			old := l.read(h)
			if kind == "manifest" {
				l.overwrite(h, replaceOnce(t, old, `"schemaVersion":2`, `"schemaVersion":3`))
			} else {
				l.overwrite(h, replaceOnce(t, old, "GVX_TEST=1", "GVX_TEST=2"))
			}
			img, err := s.Pull(ctx, ref, PullOptions{})
			if err == nil {
				t.Fatalf("second pull after the %s changed succeeded: image %s (first %s), environment %q", kind, img.ID, first.ID, img.Config.Env)
			}
			for _, w := range blobNamed(kind, h, l.blobPath(h)) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not say %q", err, w)
				}
			}
			if imgs, _ := s.List(); len(imgs) != 1 || imgs[0].ID != first.ID {
				t.Errorf("cache holds %v; want only the first pull's %s", imgs, first.ID)
			}
		})
	}
}

// rewriteArchive copies the tar at src to a new file, letting change
// replace the content of any entry.
func rewriteArchive(t *testing.T, src string, change func(name string, b []byte) []byte) string {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(t.TempDir(), "docker.tar")
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		b = change(hdr.Name, b)
		hdr.Size = int64(len(b))
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write(b)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestPullVerifiesArchiveBlobs overwrites a docker archive's config (named
// by its digest) and a layer (named by its diff_id): each pull fails
// naming the archive entry.
func TestPullVerifiesArchiveBlobs(t *testing.T) {
	b := buildTestImage(t)
	m, err := readArchiveManifest(b.Archive)
	if err != nil {
		t.Fatal(err)
	}
	cfgName, layerName := m.Config, m.Layers[0]
	cfgDigest, err := v1.NewHash(cfgName)
	if err != nil {
		t.Fatalf("config entry %q is not named by its digest: %v", cfgName, err)
	}
	l := copyLayout(t, b)
	_, lm := l.image()
	var cf v1.ConfigFile
	if err := json.Unmarshal(l.read(lm.Config.Digest), &cf); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, entry string
		change      func(t *testing.T, old []byte) []byte
		want        []string
	}{
		{"config other content", cfgName, func(t *testing.T, old []byte) []byte {
			return replaceOnce(t, old, `"GVX_TEST=1"`, `"GVX_TEST=1","EVIL=1"`)
		}, blobNamed("config", cfgDigest, b.Archive+", entry "+cfgName)},
		{"config same length", cfgName, func(t *testing.T, old []byte) []byte {
			return replaceOnce(t, old, "GVX_TEST=1", "GVX_TEST=2")
		}, blobNamed("config", cfgDigest, b.Archive+", entry "+cfgName)},
		{"layer other content", layerName, func(t *testing.T, old []byte) []byte {
			return gzipTar(t, "evil", "#!/bin/sh\n")
		}, blobNamed("layer", cf.RootFS.DiffIDs[0], b.Archive+", entry "+layerName)},
		{"layer same length", layerName, func(t *testing.T, old []byte) []byte {
			old[len(old)/2] ^= 0xff
			return old
		}, []string{"layer 1 of 3 (" + cf.RootFS.DiffIDs[0].String() + ", " + b.Archive + ", entry " + layerName + ")"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			archive := rewriteArchive(t, b.Archive, func(name string, old []byte) []byte {
				if name == c.entry {
					return c.change(t, old)
				}
				return old
			})
			want := make([]string, len(c.want))
			for i, w := range c.want {
				want[i] = strings.ReplaceAll(w, b.Archive, archive)
			}
			wantPullError(t, "docker-archive:"+archive+":"+testimage.Tag, want...)
		})
	}
}

// readArchiveManifest reads the one image entry of a docker archive's
// manifest.json.
func readArchiveManifest(archive string) (*struct {
	Config string
	Layers []string
}, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return nil, err
		}
		if hdr.Name != "manifest.json" {
			continue
		}
		var m []struct {
			Config string
			Layers []string
		}
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			return nil, err
		}
		return &m[0], nil
	}
}

// tamperingBlobs is a registry blob store that serves replaced content for
// the blobs in tampered.
type tamperingBlobs struct {
	registry.BlobHandler
	mu       sync.Mutex
	tampered map[v1.Hash][]byte
}

func (b *tamperingBlobs) replacement(h v1.Hash) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.tampered[h]
	return r, ok
}

func (b *tamperingBlobs) Get(ctx context.Context, repo string, h v1.Hash) (io.ReadCloser, error) {
	if r, ok := b.replacement(h); ok {
		return io.NopCloser(bytes.NewReader(r)), nil
	}
	return b.BlobHandler.Get(ctx, repo, h)
}

func (b *tamperingBlobs) Stat(ctx context.Context, repo string, h v1.Hash) (int64, error) {
	if r, ok := b.replacement(h); ok {
		return int64(len(r)), nil
	}
	return b.BlobHandler.(registry.BlobStatHandler).Stat(ctx, repo, h)
}

func (b *tamperingBlobs) Put(ctx context.Context, repo string, h v1.Hash, rc io.ReadCloser) error {
	return b.BlobHandler.(registry.BlobPutHandler).Put(ctx, repo, h, rc)
}

// TestPullVerifiesRegistryBlobs serves the test image from a registry on
// 127.0.0.1 whose config or layer blob is replaced by content of the same
// length: the pull fails naming the blob.
func TestPullVerifiesRegistryBlobs(t *testing.T) {
	b := buildTestImage(t)
	blobs := &tamperingBlobs{BlobHandler: registry.NewInMemoryBlobHandler(), tampered: map[v1.Hash][]byte{}}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(blobs)))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/gvx/busybox:latest"
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(b.Layout)
	if err != nil {
		t.Fatal(err)
	}
	l := copyLayout(t, b)
	top, m := l.image()
	img, err := p.Image(top.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("pushing to the in-process registry: %v", err)
	}
	source := func(h v1.Hash) string { return tag.Context().Digest(h.String()).String() }
	cases := []struct {
		kind string
		h    v1.Hash
		new  func(old []byte) []byte
	}{
		{"config", m.Config.Digest, func(old []byte) []byte { return replaceOnce(t, old, "GVX_TEST=1", "GVX_TEST=2") }},
		{"layer", m.Layers[0].Digest, func(old []byte) []byte {
			b := bytes.Clone(old)
			b[len(b)/2] ^= 0xff
			return b
		}},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			blobs.mu.Lock()
			clear(blobs.tampered)
			blobs.tampered[c.h] = c.new(l.read(c.h))
			blobs.mu.Unlock()
			wantPullError(t, ref, blobNamed(c.kind, c.h, source(c.h))...)
		})
	}
}
