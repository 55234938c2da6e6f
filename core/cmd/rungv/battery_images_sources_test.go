package main

// Image sources for the battery: OCI layouts, docker archives, a registry.

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"z.gfire.dev/gvx/core/internal/testregistry"
)

// imageSpec is a hostile image: its layers, and edits to its config and
// manifest.
type imageSpec struct {
	layers   []blob
	config   func(*v1.ConfigFile)
	manifest func(*v1.Manifest)
}

func (s imageSpec) configFile() *v1.ConfigFile {
	cf := &v1.ConfigFile{Architecture: "amd64", OS: "linux", RootFS: v1.RootFS{Type: "layers"}, Config: v1.Config{Cmd: []string{"/bin/sh"}}}
	for _, l := range s.layers {
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, l.diffID())
	}
	if s.config != nil {
		s.config(cf)
	}
	return cf
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ociLayout writes an OCI image layout.
type ociLayout struct {
	t   *testing.T
	dir string
}

func newLayout(t *testing.T, dir string) *ociLayout {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := &ociLayout{t, dir}
	l.write("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	return l
}

func (l *ociLayout) write(name string, b []byte) {
	if err := os.WriteFile(filepath.Join(l.dir, name), b, 0o644); err != nil {
		l.t.Fatal(err)
	}
}

func (l *ociLayout) blobPath(h v1.Hash) string {
	return filepath.Join(l.dir, "blobs", h.Algorithm, h.Hex)
}

// add stores b and returns its descriptor.
func (l *ociLayout) add(mt types.MediaType, b []byte) v1.Descriptor {
	h := sha256Hash(b)
	if err := os.WriteFile(l.blobPath(h), b, 0o644); err != nil {
		l.t.Fatal(err)
	}
	return v1.Descriptor{MediaType: mt, Digest: h, Size: int64(len(b))}
}

// image stores s's blobs, config and manifest and returns the manifest's
// descriptor.
func (l *ociLayout) image(s imageSpec) v1.Descriptor {
	m := &v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: l.add(types.OCIConfigJSON, mustJSON(l.t, s.configFile()))}
	for _, b := range s.layers {
		m.Layers = append(m.Layers, l.add(b.mediaType, b.data))
	}
	if s.manifest != nil {
		s.manifest(m)
	}
	return l.add(types.OCIManifestSchema1, mustJSON(l.t, m))
}

// index writes index.json listing ds, the first tagged latest.
func (l *ociLayout) index(ds ...v1.Descriptor) {
	if len(ds) > 0 {
		ds[0].Annotations = map[string]string{"org.opencontainers.image.ref.name": "latest"}
	}
	l.write("index.json", mustJSON(l.t, &v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: ds}))
}

// writeLayout writes s as an OCI layout in dir and returns its reference.
func writeLayout(t *testing.T, dir string, s imageSpec) string {
	l := newLayout(t, dir)
	l.index(l.image(s))
	return "oci:" + dir + ":latest"
}

// archiveFile is one entry of a docker archive.
type archiveFile struct {
	name string
	data []byte
	typ  byte
	link string
}

func writeTar(t *testing.T, path string, files []archiveFile) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, e := range files {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.data)), ModTime: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// archiveTag names the image in the docker archives the battery writes.
const archiveTag = "gvx.test/hostile:latest"

// archiveFiles are the entries of a `docker save` archive of s, as Docker
// before 25 writes it: HEX.json, HEX/layer.tar, manifest.json.
func archiveFiles(t *testing.T, s imageSpec) []archiveFile {
	cfg := mustJSON(t, s.configFile())
	cfgName := sha256Hash(cfg).Hex + ".json"
	files := []archiveFile{{name: cfgName, data: cfg}}
	var layers []string
	for _, b := range s.layers {
		n := b.diffID().Hex + "/layer.tar"
		layers = append(layers, n)
		files = append(files, archiveFile{name: n, data: b.data})
	}
	m := []map[string]any{{"Config": cfgName, "RepoTags": []string{archiveTag}, "Layers": layers}}
	return append(files, archiveFile{name: "manifest.json", data: mustJSON(t, m)})
}

func writeArchive(t *testing.T, path string, s imageSpec) string {
	writeTar(t, path, archiveFiles(t, s))
	return "docker-archive:" + path
}

// registryHost serves an in-process registry on 127.0.0.1.
type registryHost struct {
	host string
	n    int
}

func startBatteryRegistry(t *testing.T) *registryHost {
	return &registryHost{host: testregistry.Serve(t, "127.0.0.1")}
}

// push pushes the image of the OCI layout at dir and returns its reference,
// or "" if the registry client will not push it.
func (r *registryHost) push(t *testing.T, dir string) (string, error) {
	r.n++
	ref := fmt.Sprintf("%s/hostile/case%d:latest", r.host, r.n)
	if err := testregistry.Push(dir, ref); err != nil {
		return "", err
	}
	return ref, nil
}
