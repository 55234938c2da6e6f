package main

// The malformed-image part of the reliability battery (issue 17): hostile
// and corrupt layers, docker archives and OCI layouts, each pulled with
// `rungv pull` from an OCI layout, a docker archive and an in-process
// registry on 127.0.0.1. Each must end promptly with a clear error naming
// what is wrong (or, where docker accepts it, be accepted with everything
// kept inside the image), leaving nothing outside the cache.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/internal/battery"
)

// blob is one layer blob of a hostile image.
type blob struct {
	data      []byte
	mediaType types.MediaType
	// tar is the uncompressed tar whose digest the config gives as the
	// diff_id; nil: data is the tar.
	tar []byte
}

func (b blob) diffID() v1.Hash {
	t := b.tar
	if t == nil {
		t = b.data
	}
	return sha256Hash(t)
}

func sha256Hash(b []byte) v1.Hash {
	sum := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
}

// tarEntry is one entry of a layer tar written by archive/tar.
type tarEntry struct {
	hdr  tar.Header
	body []byte
}

func file(name, content string) tarEntry {
	return tarEntry{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(1, 0)}, []byte(content)}
}

func dirEntry(name string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(1, 0)}}
}

func special(name string, typ byte, linkname string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: typ, Mode: 0o644, Linkname: linkname, ModTime: time.Unix(1, 0)}}
}

func pax(e tarEntry, records map[string]string) tarEntry {
	e.hdr.Format, e.hdr.PAXRecords = tar.FormatPAX, records
	return e
}

// tarOf writes entries as a tar with archive/tar.
func tarOf(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("writing tar entry %q: %v", truncate(h.Name, 80), err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// rawHeader is a ustar header block built by hand, for what archive/tar
// will not write: size is the 12-byte size field as given.
func rawHeader(name string, typ byte, size []byte) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:], "0000644\x00")
	copy(h[108:], "0000000\x00")
	copy(h[116:], "0000000\x00")
	copy(h[124:136], size)
	copy(h[136:], "00000000001\x00")
	h[156] = typ
	copy(h[257:], "ustar\x0000")
	setChecksum(h)
	return h
}

func setChecksum(h []byte) {
	copy(h[148:156], "        ")
	sum := 0
	for _, b := range h {
		sum += int(b)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
}

// octal is a size field in octal.
func octal(n int64) []byte { return []byte(fmt.Sprintf("%011o\x00", n)) }

// base256 is a size field in GNU base-256 (two's complement, high bit set).
func base256(n int64) []byte {
	f := make([]byte, 12)
	for i := 11; i >= 4; i-- {
		f[i] = byte(n)
		n >>= 8
	}
	fill := byte(0)
	if f[4]&0x80 != 0 {
		fill = 0xff
	}
	for i := 0; i < 4; i++ {
		f[i] = fill
	}
	f[0] |= 0x80
	return f
}

// paxRecord is one "LEN KEY=VALUE\n" record of a PAX header, LEN counting
// itself.
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3
	for n != len(strconv.Itoa(n))+len(k)+len(v)+3 {
		n = len(strconv.Itoa(n)) + len(k) + len(v) + 3
	}
	return fmt.Sprintf("%d %s=%s\n", n, k, v)
}

// sparseTar is a layer of one GNU sparse file in PAX format 0.1: its real
// size, block count and map as given, then data.
func sparseTar(realSize, numBlocks, sparseMap, data string) []byte {
	var rec string
	for _, kv := range [][2]string{{"GNU.sparse.major", "0"}, {"GNU.sparse.minor", "1"}, {"GNU.sparse.name", "s"},
		{"GNU.sparse.realsize", realSize}, {"GNU.sparse.numblocks", numBlocks}, {"GNU.sparse.map", sparseMap}} {
		rec += paxRecord(kv[0], kv[1])
	}
	b := append(rawHeader("PaxHeaders/s", tar.TypeXHeader, octal(int64(len(rec)))), pad512([]byte(rec))...)
	b = append(b, rawHeader("s", tar.TypeReg, octal(int64(len(data))))...)
	return endBlocks(append(b, pad512([]byte(data))...))
}

func pad512(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

func endBlocks(b []byte) []byte { return append(b, make([]byte, 1024)...) }

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zst(t *testing.T, b []byte) []byte {
	t.Helper()
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	return zw.EncodeAll(b, nil)
}

// gzBlob is a gzip layer of the tar tr.
func gzBlob(t *testing.T, tr []byte) blob {
	return blob{data: gz(t, tr), mediaType: types.OCILayer, tar: tr}
}

// tarBlob is an uncompressed layer.
func tarBlob(tr []byte) blob { return blob{data: tr, mediaType: types.OCIUncompressedLayer} }

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
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return &registryHost{host: strings.TrimPrefix(srv.URL, "http://")}
}

// push pushes the image of the OCI layout at dir and returns its reference,
// or "" if the registry client will not push it.
func (r *registryHost) push(t *testing.T, dir string) (string, error) {
	r.n++
	ref := fmt.Sprintf("%s/hostile/case%d:latest", r.host, r.n)
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return "", err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return "", err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return "", err
	}
	if err := remote.Write(tag, img); err != nil {
		return "", err
	}
	return ref, nil
}

// layerCase is hostile layer content, pulled from every source.
type layerCase struct {
	name   string
	layers func(t *testing.T) []blob
	// accept: docker accepts this too; the pull may succeed.
	accept bool
	// want: what a refusal must say.
	want []string
}

func one(b func(t *testing.T) blob) func(t *testing.T) []blob {
	return func(t *testing.T) []blob { return []blob{b(t)} }
}

func tarLayer(entries ...tarEntry) func(t *testing.T) []blob {
	return func(t *testing.T) []blob { return []blob{gzBlob(t, tarOf(t, entries...))} }
}

func tarLayers(layers ...[]tarEntry) func(t *testing.T) []blob {
	return func(t *testing.T) []blob {
		var bs []blob
		for _, es := range layers {
			bs = append(bs, gzBlob(t, tarOf(t, es...)))
		}
		return bs
	}
}

// rawLayer is an uncompressed layer of hand-built blocks.
func rawLayer(build func() []byte) func(t *testing.T) []blob {
	return func(t *testing.T) []blob { return []blob{tarBlob(build())} }
}

func layerCases() []layerCase {
	const malformed = "rebuild the image"
	bigName := strings.Repeat("n", 100<<10)
	deep := strings.Repeat("d/", 10000) + "f"
	okTar := func(t *testing.T) []byte { return tarOf(t, file("a", "hello")) }
	return []layerCase{
		{name: "entry ../etc/passwd", layers: tarLayer(file("../etc/passwd", "x")), want: []string{`"../etc/passwd"`, `".." component`, malformed}},
		{name: "entry /../../etc/shadow", layers: tarLayer(file("/../../etc/shadow", "x")), want: []string{`"/../../etc/shadow"`, malformed}},
		{name: "absolute entry /etc/passwd", layers: tarLayer(file("/etc/passwd", "root::0:0::/:/bin/sh\n")), accept: true},
		{name: "symlink to /etc then a file through it", layers: tarLayer(special("a", tar.TypeSymlink, "/etc"), file("a/passwd", "pwned")), want: []string{`"a/passwd"`, "symlink", malformed}},
		{name: "symlink to ../.. then a file through it, next layer", layers: tarLayers(
			[]tarEntry{special("a", tar.TypeSymlink, "../../../..")}, []tarEntry{file("a/tmp/pwned", "x")}), want: []string{`"a/tmp/pwned"`, "symlink", malformed}},
		{name: "hard link to ../../etc/shadow", layers: tarLayer(special("x", tar.TypeLink, "../../etc/shadow")), want: []string{`"x"`, `".." component`, malformed}},
		{name: "hard link to a missing target", layers: tarLayer(special("x", tar.TypeLink, "/etc/shadow")), want: []string{`"x"`, "does not exist", malformed}},
		{name: "hard link to a directory", layers: tarLayer(dirEntry("d/"), special("x", tar.TypeLink, "d")), want: []string{`"x"`, "is a directory", malformed}},
		{name: "hard link to itself", layers: tarLayer(special("x", tar.TypeLink, "x")), want: []string{`"x"`, malformed}},
		{name: "char device 1:1 (/dev/mem)", layers: tarLayer(tarEntry{hdr: tar.Header{Name: "dev/mem", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 1}}), accept: true},
		{name: "block device 8:0 (/dev/sda)", layers: tarLayer(tarEntry{hdr: tar.Header{Name: "dev/sda", Typeflag: tar.TypeBlock, Mode: 0o666, Devmajor: 8, Devminor: 0}}), accept: true},
		{name: "FIFO", layers: tarLayer(special("run/fifo", tar.TypeFifo, "")), accept: true},
		// Tar has no socket type (docker and GNU tar skip sockets); an
		// unknown type flag is what a layer could carry.
		{name: "socket (unknown type flag)", layers: tarLayer(special("run/sock", 's', "")), want: []string{`"run/sock"`, "unsupported tar entry type", malformed}},
		{name: "header size larger than the data", layers: rawLayer(func() []byte {
			return append(rawHeader("big", tar.TypeReg, octal(1<<20)), pad512([]byte("only this"))...)
		}), want: []string{`"big"`, "truncated or corrupt"}},
		{name: "negative base-256 size", layers: rawLayer(func() []byte {
			return endBlocks(append(rawHeader("neg", tar.TypeReg, base256(-1)), pad512([]byte("x"))...))
		}), want: []string{"layer 1", "truncated or corrupt"}},
		{name: "base-256 size of 1 TiB", layers: rawLayer(func() []byte {
			return endBlocks(append(rawHeader("huge", tar.TypeReg, base256(1<<40)), pad512([]byte("x"))...))
		}), want: []string{`"huge"`, "truncated or corrupt"}},
		{name: "base-256 size, honest", layers: rawLayer(func() []byte {
			return endBlocks(append(rawHeader("b256", tar.TypeReg, base256(5)), pad512([]byte("hello"))...))
		}), accept: true},
		{name: "bad header checksum", layers: rawLayer(func() []byte {
			h := rawHeader("sum", tar.TypeReg, octal(1))
			h[148]++
			return endBlocks(append(h, pad512([]byte("x"))...))
		}), want: []string{"layer 1", "truncated or corrupt"}},
		{name: "truncated tar, in a file's content", layers: func(t *testing.T) []blob {
			tr := tarOf(t, file("a", strings.Repeat("x", 5000)), file("b", "y"))
			return []blob{tarBlob(tr[:3000])}
		}, want: []string{`"a"`, "truncated or corrupt"}},
		{name: "truncated tar, in a header", layers: func(t *testing.T) []blob {
			tr := tarOf(t, file("a", "x"), file("b", "y"))
			return []blob{tarBlob(tr[:1024+300])}
		}, want: []string{"layer 1", "truncated or corrupt"}},
		{name: "gzip corrupt", layers: one(func(t *testing.T) blob {
			b := gzBlob(t, tarOf(t, file("a", strings.Repeat("hello ", 4000))))
			b.data = bytes.Clone(b.data)
			for i := 20; i < len(b.data)-8; i += 7 {
				b.data[i] ^= 0x5a
			}
			return b
		}), want: []string{"layer 1", "corrupt"}},
		{name: "gzip truncated", layers: one(func(t *testing.T) blob {
			b := gzBlob(t, tarOf(t, file("a", strings.Repeat("hello ", 4000))))
			b.data = b.data[:len(b.data)/2]
			return b
		}), want: []string{"layer 1"}},
		{name: "gzip with trailing garbage", layers: one(func(t *testing.T) blob {
			b := gzBlob(t, okTar(t))
			b.data = append(bytes.Clone(b.data), []byte("trailing garbage, not a gzip member")...)
			return b
		}), accept: true, want: []string{"layer 1"}},
		{name: "zstd corrupt", layers: one(func(t *testing.T) blob {
			tr := tarOf(t, file("a", strings.Repeat("hello ", 4000)))
			d := bytes.Clone(zst(t, tr))
			for i := 8; i < len(d); i += 5 {
				d[i] ^= 0x5a
			}
			return blob{data: d, mediaType: types.OCILayerZStd, tar: tr}
		}), want: []string{"layer 1"}},
		{name: "zstd labelled gzip", layers: one(func(t *testing.T) blob {
			tr := okTar(t)
			return blob{data: zst(t, tr), mediaType: types.OCILayer, tar: tr}
		}), accept: true},
		{name: "gzip labelled uncompressed", layers: one(func(t *testing.T) blob {
			b := gzBlob(t, okTar(t))
			b.mediaType = types.OCIUncompressedLayer
			return b
		}), accept: true},
		{name: "uncompressed labelled zstd", layers: one(func(t *testing.T) blob {
			return blob{data: okTar(t), mediaType: types.OCILayerZStd}
		}), accept: true},
		{name: "not a tar at all", layers: one(func(t *testing.T) blob {
			return tarBlob([]byte(strings.Repeat("this is not a tar archive\n", 100)))
		}), want: []string{"layer 1", "truncated or corrupt"}},
		{name: "whiteout of the root (.wh.)", layers: tarLayers([]tarEntry{file("a", "1")}, []tarEntry{file(".wh.", "")}), want: []string{`".wh."`, "not a valid name", malformed}},
		{name: "whiteout of .. (.wh...)", layers: tarLayers([]tarEntry{file("a", "1")}, []tarEntry{file(".wh...", "")}), want: []string{`".wh..."`, "not a valid name", malformed}},
		{name: "whiteout of . (./.wh..)", layers: tarLayers([]tarEntry{file("a", "1")}, []tarEntry{file("./.wh..", "")}), want: []string{`"./.wh.."`, "not a valid name", malformed}},
		{name: "opaque whiteout at the root", layers: tarLayers([]tarEntry{file("a", "1")}, []tarEntry{file(".wh..wh..opq", ""), file("b", "2")}), accept: true},
		{name: "whiteout of a missing file", layers: tarLayers([]tarEntry{file("a", "1")}, []tarEntry{file("nope/.wh.gone", ""), file(".wh.gone", "")}), accept: true},
		{name: "10,000 directories deep", layers: tarLayer(pax(file(deep, "deep"), nil)), accept: true, want: []string{"layer 1"}},
		{name: "100 KiB file name", layers: tarLayer(pax(file(bigName, "x"), nil)), want: []string{"layer 1", "102400 bytes long; the limit is 255"}},
		{name: "1 MiB PAX header", layers: rawLayer(func() []byte {
			rec := paxRecord("SCHILY.xattr.user.big", strings.Repeat("v", 1<<20))
			b := append(rawHeader("PaxHeaders/p", tar.TypeXHeader, octal(int64(len(rec)))), pad512([]byte(rec))...)
			b = append(b, rawHeader("p", tar.TypeReg, octal(1))...)
			return endBlocks(append(b, pad512([]byte("x"))...))
		}), want: []string{"layer 1"}},
		{name: "dir then file of one name", layers: tarLayer(dirEntry("d/"), file("d/in", "1"), file("d", "now a file")), accept: true},
		{name: "file then dir of one name", layers: tarLayer(file("d", "a file"), dirEntry("d/"), file("d/in", "1")), accept: true},
		{name: "the same file twice", layers: tarLayer(file("f", "first"), file("f", "second")), accept: true},
		// archive/tar writes no sparse files: these PAX headers are built
		// by hand (GNU sparse format 0.1, as GNU tar writes with PAX).
		{name: "PAX sparse map past the end", layers: rawLayer(func() []byte {
			return sparseTar("10", "1", "1000,5", "hello")
		}), want: []string{`layer 1, entry "s"`, "sparse map", "past the file's length", malformed}},
		{name: "PAX sparse map of overlapping blocks", layers: rawLayer(func() []byte {
			return sparseTar("100", "2", "10,5,12,5", "helloworld")
		}), want: []string{`layer 1, entry "s"`, "sparse map", "overlapping", malformed}},
		{name: "PAX sparse map claiming 2^31 entries", layers: rawLayer(func() []byte {
			return sparseTar("10", strconv.Itoa(1<<31), "0,5", "hello")
		}), want: []string{`layer 1, entry "s"`, "sparse map", "GNU.sparse.numblocks", malformed}},
		{name: "PAX sparse map with a negative offset", layers: rawLayer(func() []byte {
			return sparseTar("10", "1", "-5,5", "hello")
		}), want: []string{`layer 1, entry "s"`, "sparse map", "negative", malformed}},
		{name: "PAX sparse map placing more data than stored", layers: rawLayer(func() []byte {
			return sparseTar("100", "1", "0,9", "hello")
		}), want: []string{`layer 1, entry "s"`, "sparse map", "places 9 bytes of data but the entry stores 5", malformed}},
		// Accepted as docker accepts it; its holes cost nothing to
		// convert, and stay holes in the image.
		{name: "PAX sparse file claiming 15 TiB", layers: rawLayer(func() []byte {
			return sparseTar(strconv.FormatInt(15<<40, 10), "1", "0,5", "hello")
		}), accept: true, want: []string{"layer 1"}},
		{name: "PAX sparse file, honest", layers: rawLayer(func() []byte {
			return sparseTar("20000", "2", "0,5,10000,5", "helloworld")
		}), accept: true},
		{name: "xattrs with bad names", layers: tarLayer(pax(file("x", "x"), map[string]string{
			"SCHILY.xattr.": "empty", "SCHILY.xattr.nonamespace": "v", "SCHILY.xattr.user." + strings.Repeat("k", 300): "long",
			"SCHILY.xattr.security.\xff\xfe": "bad utf8"})), accept: true, want: []string{`"x"`}},
		{name: "setuid and setgid root files", layers: tarLayer(
			tarEntry{tar.Header{Name: "bin/suid", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 2}, []byte("#!")},
			tarEntry{tar.Header{Name: "bin/sgid", Typeflag: tar.TypeReg, Mode: 0o2755, Size: 2}, []byte("#!")},
			tarEntry{hdr: tar.Header{Name: "sticky/", Typeflag: tar.TypeDir, Mode: 0o1777}}), accept: true},
	}
}

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

func mkfifo(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
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

// TestBatteryMalformedImages pulls every hostile layer from an OCI layout,
// a docker archive and an in-process registry (the full run; the cheap run
// takes one source per layer, in turn), and every hostile archive and
// layout as it is. Each pull ends within the hang deadline with a clear
// error that names what is wrong, or, for what docker accepts, succeeds;
// a run that fails leaves the cache as it was and its tmp/ empty, and no
// run leaves anything in its home, temporary or working directory, nor a
// device node, FIFO, socket or set-ID file anywhere in the cache.
func TestBatteryMalformedImages(t *testing.T) {
	seed := battery.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	reg := startBatteryRegistry(t)
	var c tally
	first := rng.IntN(3)
	var failures []string

	type pullCase struct {
		name   string
		ref    string
		input  string // the directory holding the input
		env    []string
		accept bool
		want   []string
	}
	var cases []pullCase
	for i, lc := range layerCases() {
		dir := t.TempDir()
		s := imageSpec{layers: lc.layers(t)}
		sources := []int{0, 1, 2}
		if !battery.Full() {
			sources = []int{(first + i) % 3}
		}
		for _, src := range sources {
			var ref string
			switch src {
			case 0:
				ref = writeLayout(t, filepath.Join(dir, "oci"), s)
			case 1:
				ref = writeArchive(t, filepath.Join(dir, "docker.tar"), s)
			case 2:
				var err error
				if ref, err = reg.push(t, writeLayoutDir(t, filepath.Join(dir, "push"), s)); err != nil {
					t.Logf("%s: the registry client will not push it (%v); pulling the layout instead", lc.name, err)
					ref = writeLayout(t, filepath.Join(dir, "oci"), s)
				}
			}
			pc := pullCase{name: lc.name + " / " + [...]string{"oci", "docker-archive", "registry"}[src], ref: ref, input: dir, accept: lc.accept, want: lc.want}
			cases = append(cases, pc)
			if battery.Full() && strings.HasPrefix(lc.name, "gzip") {
				// Go's inflater as well as igzip.
				pc.name += " / go inflate"
				pc.env = []string{image.InflateEnv + "=go"}
				cases = append(cases, pc)
			}
		}
	}
	for _, sc := range structureCases() {
		dir := t.TempDir()
		cases = append(cases, pullCase{name: sc.name, ref: sc.input(t, dir), input: dir, accept: sc.accept, want: sc.want})
	}

	for _, pc := range cases {
		sc := newScratch(t)
		cache := t.TempDir()
		before := treeListing(pc.input)
		args := []string{"--cache", cache, "pull", "-q"}
		if strings.HasPrefix(pc.ref, reg.host) {
			args = append(args, "--insecure")
		}
		sc.extraEnv = pc.env
		r := sc.run(append(args, pc.ref)...)
		outcome, detail := classify(r, pc.want)
		if outcome == outAccepted && !pc.accept {
			outcome, detail = outUnclear, "accepted: docker refuses this; want a clear error"
		}
		effects := sc.leftovers()
		if after := treeListing(pc.input); !slices.Equal(before, after) {
			effects = append(effects, "the input changed")
		}
		effects = append(effects, hostileFiles(cache)...)
		effects = append(effects, cacheLeftovers(cache)...)
		if outcome != outAccepted {
			if imgs, _ := os.ReadDir(filepath.Join(cache, "images")); len(imgs) != 0 {
				effects = append(effects, "a failed pull cached an image")
			}
		}
		c.add(pc.name, outcome, r.took, len(effects))
		t.Logf("%-60s %-13s %5d ms  %s", pc.name, outcome, r.took.Milliseconds(), truncate(firstLine(r.stderr), 240))
		if outcome != outClear && outcome != outAccepted {
			failures = append(failures, fmt.Sprintf("%s: %s: %s", pc.name, outcome, detail))
		}
		if len(effects) > 0 {
			failures = append(failures, fmt.Sprintf("%s: left %q", pc.name, effects))
		}
	}
	c.table(t, "Malformed images: hostile and corrupt layers, docker archives and OCI layouts through `rungv pull`")
	if len(failures) > 0 {
		t.Errorf("%d of %d cases failed:\n%s", len(failures), c.tried, strings.Join(failures, "\n"))
	}
}

// writeLayoutDir writes s as an OCI layout and returns the directory.
func writeLayoutDir(t *testing.T, dir string, s imageSpec) string {
	writeLayout(t, dir, s)
	return dir
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
