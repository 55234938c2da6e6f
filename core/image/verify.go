package image

import (
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Blob kinds, as BlobError names them.
const (
	KindIndex    = "index"
	KindManifest = "manifest"
	KindConfig   = "config"
	KindLayer    = "layer"
)

// maxJSONBlob bounds the indexes, manifests and configs read into memory.
// Real ones are kilobytes (a config with a long history tens of them); the
// bound keeps a descriptor or a file from making a pull allocate gigabytes.
const maxJSONBlob = 16 << 20

// BlobError reports a blob that is not what the descriptor naming it says:
// its digest or size differ, or the descriptor is unusable.
type BlobError struct {
	Kind   string  // KindIndex, KindManifest, KindConfig or KindLayer
	Digest v1.Hash // the digest that names the blob
	Source string  // where the blob was read: a file, a tar entry, a registry blob
	Reason string
	// Err is what went wrong reading it, if that is the cause.
	Err error
}

func (e *BlobError) Error() string {
	msg := fmt.Sprintf("the %s blob %s (%s): %s", e.Kind, e.Digest, e.Source, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + "; it is damaged or was replaced after the image was written: get the image again from where it came from (a registry, docker save, skopeo copy) or rebuild it"
}

func (e *BlobError) Unwrap() error { return e.Err }

// blobReader passes a blob through while hashing it, and fails the read
// that ends it if its size or digest differ from its descriptor's. It never
// reads more than one byte past the descriptor's size.
type blobReader struct {
	r      io.Reader
	kind   string
	desc   v1.Descriptor
	source string
	h      hash.Hash
	n      int64
	err    error // sticky: the verdict at the end, or the first read error
}

// newBlobReader verifies r against d as it is read. It refuses, before any
// read, a descriptor whose size is negative or whose algorithm is unknown.
func newBlobReader(r io.Reader, kind string, d v1.Descriptor, source string) (*blobReader, error) {
	if d.Size < 0 {
		return nil, &BlobError{Kind: kind, Digest: d.Digest, Source: source, Reason: fmt.Sprintf("its descriptor gives the size %d", d.Size)}
	}
	h, err := v1.Hasher(d.Digest.Algorithm)
	if err != nil {
		return nil, &BlobError{Kind: kind, Digest: d.Digest, Source: source, Reason: "its digest cannot be checked", Err: err}
	}
	return &blobReader{r: r, kind: kind, desc: d, source: source, h: h}, nil
}

func (b *blobReader) fail(reason string, err error) error {
	b.err = &BlobError{Kind: b.kind, Digest: b.desc.Digest, Source: b.source, Reason: reason, Err: err}
	return b.err
}

// Read implements io.Reader.
func (b *blobReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// One byte more than the descriptor allows shows a longer blob.
	if left := b.desc.Size + 1 - b.n; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	switch {
	case b.n > b.desc.Size:
		return n, b.fail(fmt.Sprintf("it is longer than the %d bytes its descriptor gives", b.desc.Size), nil)
	case err == io.EOF:
		if verr := b.verdict(); verr != nil {
			return n, verr
		}
		b.err = io.EOF
	case err != nil:
		b.err = err
	}
	return n, err
}

// verdict compares what was read, all of the blob, with the descriptor.
func (b *blobReader) verdict() error {
	if b.n != b.desc.Size {
		return b.fail(fmt.Sprintf("it is %d bytes long, but its descriptor gives %d", b.n, b.desc.Size), nil)
	}
	if got := hex.EncodeToString(b.h.Sum(nil)); got != b.desc.Digest.Hex {
		return b.fail(fmt.Sprintf("its content has digest %s:%s", b.desc.Digest.Algorithm, got), nil)
	}
	return nil
}

// finish reads what is left of the blob, without keeping it, and returns
// the verdict: nil if the whole blob matches its descriptor.
func (b *blobReader) finish() error {
	if _, err := io.Copy(io.Discard, b); err != nil {
		if _, ok := err.(*BlobError); ok {
			return err
		}
		return b.fail("reading it", err)
	}
	return nil
}

// readJSONBlob reads the small blob d names from open and verifies it.
func readJSONBlob(kind string, d v1.Descriptor, source string, open func() (io.ReadCloser, error)) ([]byte, error) {
	if d.Size > maxJSONBlob {
		return nil, &BlobError{Kind: kind, Digest: d.Digest, Source: source, Reason: fmt.Sprintf("its descriptor gives %d bytes; gvx reads at most %d bytes of image metadata", d.Size, maxJSONBlob)}
	}
	rc, err := open()
	if err != nil {
		return nil, &BlobError{Kind: kind, Digest: d.Digest, Source: source, Reason: "opening it", Err: err}
	}
	defer rc.Close()
	br, err := newBlobReader(rc, kind, d, source)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(br)
	if err != nil {
		if _, ok := err.(*BlobError); ok {
			return nil, err
		}
		return nil, br.fail("reading it", err)
	}
	return b, nil
}
