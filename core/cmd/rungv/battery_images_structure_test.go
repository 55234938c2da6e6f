package main

// The malformed-image battery's broken manifests, configs, archives, layouts.

import (
	"archive/tar"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// structureCase is a hostile docker archive or OCI layout, pulled as it is.
type structureCase struct {
	name string
	// input writes the input in dir and returns the reference to pull.
	input  func(t *testing.T, dir string) string
	accept bool
	want   []string
}

func goodSpec(t *testing.T) imageSpec {
	return imageSpec{layers: []blob{gzBlob(t, tarOf(t, file("a", "hello")))}}
}

// editArchive writes a docker archive of goodSpec after change edits its
// entries.
func editArchive(change func(t *testing.T, files []archiveFile) []archiveFile) func(t *testing.T, dir string) string {
	return func(t *testing.T, dir string) string {
		p := filepath.Join(dir, "docker.tar")
		writeTar(t, p, change(t, archiveFiles(t, goodSpec(t))))
		return "docker-archive:" + p
	}
}

func setManifestJSON(raw string) func(t *testing.T, files []archiveFile) []archiveFile {
	return func(t *testing.T, files []archiveFile) []archiveFile {
		files[len(files)-1].data = []byte(raw)
		return files
	}
}

// editManifest rewrites the archive's manifest.json entry through change.
func editManifest(change func(m map[string]any)) func(t *testing.T, files []archiveFile) []archiveFile {
	return func(t *testing.T, files []archiveFile) []archiveFile {
		var m []map[string]any
		if err := json.Unmarshal(files[len(files)-1].data, &m); err != nil {
			t.Fatal(err)
		}
		change(m[0])
		files[len(files)-1].data = mustJSON(t, m)
		return files
	}
}

// editLayout writes an OCI layout of goodSpec and lets change edit it.
func editLayout(change func(t *testing.T, l *ociLayout) string) func(t *testing.T, dir string) string {
	return func(t *testing.T, dir string) string {
		return change(t, newLayout(t, dir))
	}
}

func structureCases() []structureCase {
	const notAnArchive = "is it a `docker save` tarball?"
	return []structureCase{
		// docker save archives.
		{name: "archive: no manifest.json", input: editArchive(func(t *testing.T, f []archiveFile) []archiveFile { return f[:len(f)-1] }),
			want: []string{"manifest.json", notAnArchive}},
		{name: "archive: manifest.json not JSON", input: editArchive(setManifestJSON(`[{"Config": `)), want: []string{"manifest.json", notAnArchive}},
		{name: "archive: manifest.json an object", input: editArchive(setManifestJSON(`{"Config": "x"}`)), want: []string{"manifest.json", notAnArchive}},
		{name: "archive: manifest.json lists no image", input: editArchive(setManifestJSON(`[]`)), want: []string{"manifest.json lists 0 images"}},
		{name: "archive: manifest.json is 20 MiB", input: editArchive(setManifestJSON(`[{"Config":"` + strings.Repeat("x", 20<<20) + `"}]`)), want: []string{"manifest.json"}},
		{name: "archive: layer path ../../etc/passwd", input: editArchive(editManifest(func(m map[string]any) { m["Layers"] = []string{"../../../../etc/passwd"} })),
			want: []string{"../../../../etc/passwd"}},
		{name: "archive: layer path /etc/passwd", input: editArchive(editManifest(func(m map[string]any) { m["Layers"] = []string{"/etc/passwd"} })),
			want: []string{"/etc/passwd"}},
		{name: "archive: config path ../etc/passwd", input: editArchive(editManifest(func(m map[string]any) { m["Config"] = "../../etc/passwd" })),
			want: []string{"../../etc/passwd"}},
		{name: "archive: missing config", input: editArchive(func(t *testing.T, f []archiveFile) []archiveFile { return f[1:] }), want: []string{".json"}},
		{name: "archive: config not JSON", input: editArchive(func(t *testing.T, f []archiveFile) []archiveFile {
			f[0].data = []byte("not json")
			return f
		}), want: []string{"config"}},
		{name: "archive: more layers than diff_ids", input: editArchive(editManifest(func(m map[string]any) {
			m["Layers"] = append(m["Layers"].([]any), m["Layers"].([]any)[0])
		})), want: []string{"malformed"}},
		{name: "archive: layer entry a symlink loop", input: editArchive(func(t *testing.T, f []archiveFile) []archiveFile {
			f[1] = archiveFile{name: f[1].name, typ: tar.TypeSymlink, link: "loop.tar"}
			return append(f, archiveFile{name: filepath.Dir(f[1].name) + "/loop.tar", typ: tar.TypeSymlink, link: "layer.tar"})
		}), want: []string{"links"}},
		{name: "archive: no RepoTags", input: editArchive(editManifest(func(m map[string]any) { delete(m, "RepoTags") })), accept: true},
		{name: "archive: RepoTags not tags, pulled by tag", input: func(t *testing.T, dir string) string {
			return editArchive(editManifest(func(m map[string]any) { m["RepoTags"] = []string{"NOT A TAG!", "", "a:b:c:d"} }))(t, dir) + ":" + archiveTag
		}, want: []string{"no image tagged"}},
		{name: "archive: pulled by a tag it lacks", input: func(t *testing.T, dir string) string {
			return editArchive(func(t *testing.T, f []archiveFile) []archiveFile { return f })(t, dir) + ":other/name:v1"
		}, want: []string{"no image tagged"}},
		{name: "archive: not a tar", input: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "docker.tar")
			os.WriteFile(p, []byte(strings.Repeat("not a tar\n", 200)), 0o644)
			return "docker-archive:" + p
		}, want: []string{notAnArchive}},
		{name: "archive: truncated", input: func(t *testing.T, dir string) string {
			ref := editArchive(func(t *testing.T, f []archiveFile) []archiveFile { return f })(t, dir)
			p := strings.TrimPrefix(ref, "docker-archive:")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
			return ref
		}, want: []string{"docker.tar"}},
		{name: "archive: a FIFO", input: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "docker.tar")
			mkfifo(t, p)
			return "docker-archive:" + p
		}, want: []string{"FIFO"}},
		{name: "archive: a directory", input: func(t *testing.T, dir string) string { return "docker-archive:" + dir }, want: []string{"directory"}},
		{name: "archive: missing", input: func(t *testing.T, dir string) string { return "docker-archive:" + filepath.Join(dir, "nope.tar") }, want: []string{"nope.tar"}},

		// OCI layouts.
		{name: "layout: no oci-layout file", input: func(t *testing.T, dir string) string {
			ref := writeLayout(t, dir, goodSpec(t))
			os.Remove(filepath.Join(dir, "oci-layout"))
			return ref
		}, accept: true, want: []string{"oci-layout"}},
		{name: "layout: oci-layout not JSON", input: func(t *testing.T, dir string) string {
			ref := writeLayout(t, dir, goodSpec(t))
			os.WriteFile(filepath.Join(dir, "oci-layout"), []byte("{{{"), 0o644)
			return ref
		}, accept: true, want: []string{"oci-layout"}},
		{name: "layout: oci-layout version 9", input: func(t *testing.T, dir string) string {
			ref := writeLayout(t, dir, goodSpec(t))
			os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"9.0.0"}`), 0o644)
			return ref
		}, accept: true, want: []string{"oci-layout"}},
		{name: "layout: no index.json", input: func(t *testing.T, dir string) string {
			ref := writeLayout(t, dir, goodSpec(t))
			os.Remove(filepath.Join(dir, "index.json"))
			return ref
		}, want: []string{"index.json"}},
		{name: "layout: index.json not JSON", input: func(t *testing.T, dir string) string {
			ref := writeLayout(t, dir, goodSpec(t))
			os.WriteFile(filepath.Join(dir, "index.json"), []byte(`{"manifests":[`), 0o644)
			return ref
		}, want: []string{"index.json"}},
		{name: "layout: index.json a FIFO", input: func(t *testing.T, dir string) string {
			ref := writeLayout(t, dir, goodSpec(t))
			mkfifo(t, filepath.Join(dir, "index.json"))
			return ref
		}, want: []string{"index.json", "FIFO"}},
		{name: "layout: index.json names a digest of an unknown algorithm", input: func(t *testing.T, dir string) string {
			writeLayout(t, dir, goodSpec(t))
			os.WriteFile(filepath.Join(dir, "index.json"), []byte(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"md5:../../../etc/passwd","size":10}]}`), 0o644)
			return "oci:" + dir
		}, want: []string{"index.json"}},
		{name: "layout: empty index", input: editLayout(func(t *testing.T, l *ociLayout) string {
			l.index()
			return "oci:" + l.dir
		}), want: []string{"is empty"}},
		{name: "layout: manifest of an unknown media type", input: editLayout(func(t *testing.T, l *ociLayout) string {
			d := l.image(goodSpec(t))
			d.MediaType = "application/vnd.evil.manifest+json"
			l.index(d)
			return "oci:" + l.dir + ":latest"
		}), want: []string{"application/vnd.evil.manifest+json"}},
		{name: "layout: layer of an unknown media type", input: editLayout(func(t *testing.T, l *ociLayout) string {
			s := goodSpec(t)
			s.layers[0].mediaType = "application/vnd.evil.layer"
			l.index(l.image(s))
			return "oci:" + l.dir + ":latest"
		}), accept: true, want: []string{"application/vnd.evil.layer"}},
		{name: "layout: config of an unknown media type", input: editLayout(func(t *testing.T, l *ociLayout) string {
			l.index(l.image(imageSpec{layers: goodSpec(t).layers, manifest: func(m *v1.Manifest) { m.Config.MediaType = "application/vnd.evil.config" }}))
			return "oci:" + l.dir + ":latest"
		}), accept: true, want: []string{"application/vnd.evil.config"}},
		{name: "layout: index with no linux/amd64 manifest", input: editLayout(func(t *testing.T, l *ociLayout) string {
			var ds []v1.Descriptor
			for _, p := range []v1.Platform{{OS: "linux", Architecture: "arm64"}, {OS: "windows", Architecture: "amd64"}} {
				d := l.image(goodSpec(t))
				d.Platform = &p
				ds = append(ds, d)
			}
			l.index(l.add(types.OCIImageIndex, mustJSON(t, &v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: ds})))
			return "oci:" + l.dir + ":latest"
		}), want: []string{"no image for platform linux/amd64", "linux/arm64"}},
		{name: "layout: manifest with zero layers", input: editLayout(func(t *testing.T, l *ociLayout) string {
			l.index(l.image(imageSpec{}))
			return "oci:" + l.dir + ":latest"
		}), accept: true, want: []string{"layers"}},
		{name: "layout: manifest not JSON", input: editLayout(func(t *testing.T, l *ociLayout) string {
			l.index(l.add(types.OCIManifestSchema1, []byte("not json")))
			return "oci:" + l.dir + ":latest"
		}), want: []string{"manifest blob", "it is not an image manifest"}},
		{name: "layout: manifest blob missing", input: editLayout(func(t *testing.T, l *ociLayout) string {
			d := l.image(goodSpec(t))
			os.Remove(l.blobPath(d.Digest))
			l.index(d)
			return "oci:" + l.dir + ":latest"
		}), want: []string{"manifest blob"}},
		{name: "layout: config blob missing", input: editLayout(func(t *testing.T, l *ociLayout) string {
			var cfg v1.Hash
			l.index(l.image(imageSpec{layers: goodSpec(t).layers, manifest: func(m *v1.Manifest) { cfg = m.Config.Digest }}))
			os.Remove(l.blobPath(cfg))
			return "oci:" + l.dir + ":latest"
		}), want: []string{"config blob"}},
		{name: "layout: layer blob a FIFO", input: editLayout(func(t *testing.T, l *ociLayout) string {
			var layer v1.Hash
			l.index(l.image(imageSpec{layers: goodSpec(t).layers, manifest: func(m *v1.Manifest) { layer = m.Layers[0].Digest }}))
			mkfifo(t, l.blobPath(layer))
			return "oci:" + l.dir + ":latest"
		}), want: []string{"layer blob", "FIFO"}},
		{name: "layout: layer blob a directory", input: editLayout(func(t *testing.T, l *ociLayout) string {
			var layer v1.Hash
			l.index(l.image(imageSpec{layers: goodSpec(t).layers, manifest: func(m *v1.Manifest) { layer = m.Layers[0].Digest }}))
			os.Remove(l.blobPath(layer))
			os.Mkdir(l.blobPath(layer), 0o755)
			return "oci:" + l.dir + ":latest"
		}), want: []string{"layer blob", "directory"}},
		{name: "layout: config lists more diff_ids than layers", input: editLayout(func(t *testing.T, l *ociLayout) string {
			s := goodSpec(t)
			s.config = func(cf *v1.ConfigFile) { cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, cf.RootFS.DiffIDs[0]) }
			l.index(l.image(s))
			return "oci:" + l.dir + ":latest"
		}), want: []string{"malformed"}},
		{name: "layout: nested index 1,000 deep", input: editLayout(func(t *testing.T, l *ociLayout) string {
			d := l.image(goodSpec(t))
			for range 1000 {
				d.Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
				d = l.add(types.OCIImageIndex, mustJSON(t, &v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{d}}))
			}
			l.index(d)
			return "oci:" + l.dir + ":latest"
		}), accept: true, want: []string{"index"}},
		// Blobs are named by their digests, and each is checked as it is
		// read, so a loop of indexes cannot be written: each would have
		// to hold its own digest. What can be written is an index whose
		// child names the index's own digest, with its blob replaced.
		{name: "layout: index naming itself", input: editLayout(func(t *testing.T, l *ociLayout) string {
			child := l.add(types.OCIImageIndex, []byte(`{}`))
			child.Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
			top := l.add(types.OCIImageIndex, mustJSON(t, &v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{child}}))
			raw, _ := os.ReadFile(l.blobPath(top.Digest))
			// child's blob now holds the top index: a loop, if digests
			// were not checked.
			os.WriteFile(l.blobPath(child.Digest), raw, 0o644)
			l.index(top)
			return "oci:" + l.dir + ":latest"
		}), want: []string{"index blob"}},
		{name: "layout: 10,000 manifests in the index", input: editLayout(func(t *testing.T, l *ociLayout) string {
			d := l.image(goodSpec(t))
			ds := make([]v1.Descriptor, 10000)
			for i := range ds {
				ds[i] = d
				ds[i].Platform = &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v" + strconv.Itoa(i)}
			}
			ds[len(ds)-1].Platform = &v1.Platform{OS: "linux", Architecture: "amd64"}
			l.index(l.add(types.OCIImageIndex, mustJSON(t, &v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: ds})))
			return "oci:" + l.dir + ":latest"
		}), accept: true},
		{name: "layout: missing directory", input: func(t *testing.T, dir string) string { return "oci:" + filepath.Join(dir, "nope") }, want: []string{"nope"}},
		{name: "layout: a file, not a directory", input: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			os.WriteFile(p, []byte("x"), 0o644)
			return "oci:" + p
		}, want: []string{"file"}},
	}
}
