package image

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"z.gfire.dev/gvx/core/fstree"
)

// Progress reports how far Flatten got. Bytes count what is read from the
// source: compressed bytes where layers are stored compressed.
type Progress struct {
	Layer  int    // 1-based index of the layer being read
	Layers int    // number of layers
	Digest string // the layer's digest
	Done   int64  // bytes of this layer read so far
	Size   int64  // bytes of this layer in total (0 if unknown)
	// AllDone and AllSize sum over all layers.
	AllDone, AllSize int64
	// LayerDone is set on the one report made when a layer is complete.
	LayerDone bool
}

// FlattenOptions tune Flatten.
type FlattenOptions struct {
	// Progress, if set, is called as layers are read, from another
	// goroutine.
	Progress func(Progress)
	// GoInflate inflates gzip layers in this process even where igzip is
	// installed (see Inflater).
	GoInflate bool
}

// progressStep is how many bytes pass between Progress calls.
const progressStep = 1 << 20

// Flatten streams img's layers, bottom first, into sink and returns the
// flattened tree. Each layer blob is checked, as it streams by, against
// the size and digest of the descriptor that names it, and its
// uncompressed content against the config's diff_id, which the image ID
// covers. A docker archive stores its layers uncompressed under no digest:
// the diff_id is their check.
func Flatten(ctx context.Context, img *Image, sink DataSink, opts FlattenOptions) (*fstree.Node, FlattenStats, error) {
	p := Progress{Layers: len(img.Layers)}
	for _, l := range img.Layers {
		p.AllSize += l.Blob.Size
	}
	f := NewFlattener(sink)
	// Looked up once: every gzip layer of the image goes the same way.
	var igzip string
	if !opts.GoInflate {
		igzip = igzipPath()
	}
	gzipped := false
	for i, l := range img.Layers {
		if err := ctx.Err(); err != nil {
			return nil, FlattenStats{}, err
		}
		p.Layer = i + 1
		p.Done, p.Size = 0, l.Blob.Size
		p.Digest = l.Blob.Digest.String()
		if l.Blob.Digest.Hex == "" {
			p.Digest = l.DiffID.String()
		}
		src := layerSource{layer: l, igzip: igzip}
		if err := src.apply(ctx, f, &p, opts.Progress); err != nil {
			if berr := (*BlobError)(nil); errors.As(err, &berr) {
				// It names the blob already.
				return nil, FlattenStats{}, fmt.Errorf("layer %d of %d: %w", i+1, len(img.Layers), err)
			}
			return nil, FlattenStats{}, fmt.Errorf("layer %d of %d (%s, %s): %w", i+1, len(img.Layers), p.Digest, l.Source, err)
		}
		gzipped = gzipped || src.gzipped
		p.AllDone += p.Done
		if opts.Progress != nil {
			done := p
			done.LayerDone = true
			opts.Progress(done)
		}
	}
	stats := f.Stats()
	switch {
	case gzipped && igzip != "":
		stats.GzipInflater = "igzip"
	case gzipped:
		stats.GzipInflater = "go"
	}
	return f.Root(), stats, nil
}

type layerSource struct {
	layer Layer
	// igzip is the igzip binary that inflates gzip; "": inflate in Go.
	igzip string
	// gzipped is set by apply if the layer was gzip.
	gzipped bool
}

func (s *layerSource) apply(ctx context.Context, f *Flattener, p *Progress, progress func(Progress)) error {
	l := s.layer
	// A docker archive's layer blob is named by its diff_id alone.
	named := l.Blob.Digest
	if named.Hex == "" {
		named = l.DiffID
	}
	diffHash, err := v1.Hasher(l.DiffID.Algorithm)
	if err != nil {
		return &BlobError{Kind: KindLayer, Digest: l.DiffID, Source: l.Source, Reason: "its diff_id cannot be checked", Err: err}
	}
	rc, err := l.open()
	if err != nil {
		return &BlobError{Kind: KindLayer, Digest: named, Source: l.Source, Reason: "opening it", Err: err}
	}
	defer rc.Close()
	var (
		in   io.Reader = rc
		blob *blobReader
	)
	if l.Blob.Digest.Hex != "" {
		if blob, err = newBlobReader(rc, KindLayer, l.Blob, l.Source); err != nil {
			return err
		}
		in = blob
	}

	// The producer goroutine reads, hashes, decompresses and hashes the
	// uncompressed stream (igzip's feeder reads and hashes the blob); this
	// one parses the tar and writes content, which is the longer job.
	raw := &countingReader{r: in, p: p, progress: progress}
	ra := newReadahead(ctx, func() (io.Reader, func() error, error) {
		r, release, gzipped, err := decompress(ctx, raw, s.igzip)
		if err != nil {
			return nil, nil, err
		}
		// Read by Flatten once ra is closed, after this goroutine ends.
		s.gzipped = gzipped
		return io.TeeReader(r, diffHash), release, nil
	})
	err = readLayer(ctx, f, ra)
	// Stops the producer: from here on this goroutine alone reads the blob.
	ra.Close()
	if err := ctx.Err(); err != nil {
		return err
	}
	// A blob that is not the one its descriptor names is the cause of
	// whatever else went wrong with it: read the rest of it (nothing is
	// read twice) for the verdict.
	if blob != nil {
		if berr := blob.finish(); berr != nil {
			return berr
		}
	}
	if err != nil {
		return err
	}
	// The producer hashed the last bytes before it sent the end of the
	// stream that readLayer saw.
	if got := hex.EncodeToString(diffHash.Sum(nil)); got != l.DiffID.Hex {
		reason := fmt.Sprintf("its uncompressed content has digest %s:%s, but the image config gives the diff_id %s", l.DiffID.Algorithm, got, l.DiffID)
		return &BlobError{Kind: KindLayer, Digest: named, Source: l.Source, Reason: reason}
	}
	return nil
}

// readLayer applies one uncompressed layer from r, and reads r to its end.
func readLayer(ctx context.Context, f *Flattener, r io.Reader) error {
	if err := f.ApplyLayerContext(ctx, r); err != nil {
		return err
	}
	// The tar end marker may be followed by padding; the digest covers it.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("reading past the end of the tar stream: %w (the blob is truncated or corrupt: get the image again from where it came from, or rebuild it)", err)
	}
	return nil
}

// decompress sniffs r's compression (gzip, zstd or none) and returns the
// decompressed stream, a function that releases the decoder, and whether
// the stream was gzip. Gzip goes to the igzip binary if one is given.
func decompress(ctx context.Context, r io.Reader, igzip string) (_ io.Reader, release func() error, gzipped bool, _ error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil && err != io.EOF {
		return nil, nil, false, fmt.Errorf("reading: %w", err)
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		if igzip != "" {
			zr, err := startIgzip(ctx, igzip, br)
			if err != nil {
				return nil, nil, false, err
			}
			return zr, zr.Close, true, nil
		}
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, false, fmt.Errorf("gzip: %w (the blob is corrupt)", err)
		}
		// Concatenated gzip members are one stream; that is what
		// compress/gzip does too.
		return zr, zr.Close, true, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, false, fmt.Errorf("zstd: %w", err)
		}
		return zr, func() error { zr.Close(); return nil }, false, nil
	}
	return br, func() error { return nil }, false, nil
}

type countingReader struct {
	r        io.Reader
	p        *Progress
	progress func(Progress)
	last     int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.Done += int64(n)
	if c.progress != nil && c.p.Done-c.last >= progressStep {
		c.last = c.p.Done
		p := *c.p
		p.AllDone += p.Done
		c.progress(p)
	}
	return n, err
}
