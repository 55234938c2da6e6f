package main

// The malformed-image battery's hostile layers, each pulled from every source.

import (
	"archive/tar"
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

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
