package main

// Builders of the battery's layers: tar entries, raw headers, compressed blobs.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
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
