package image

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	// Uncompressed reads layers through v1.Layer.Uncompressed instead of
	// decompressing Compressed: right for sources that store layers
	// uncompressed (docker save), where Compressed would re-compress.
	Uncompressed bool
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
// flattened tree. Every layer's uncompressed content is checked against the
// image config's diff_ids, which the image ID covers: a damaged or foreign
// blob either fails to decompress or fails that check. Hashing compressed
// blobs as well would add nothing to it and would cost the decompressing
// core, which bounds the conversion's speed; registry downloads are checked
// against their blob digests by the registry client anyway.
func Flatten(ctx context.Context, img v1.Image, sink DataSink, opts FlattenOptions) (*fstree.Node, FlattenStats, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, FlattenStats{}, fmt.Errorf("listing layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, FlattenStats{}, fmt.Errorf("reading the image config: %w", err)
	}
	if len(cf.RootFS.DiffIDs) != len(layers) {
		return nil, FlattenStats{}, fmt.Errorf("the image config lists %d layers (rootfs.diff_ids) but the manifest %d; the image is malformed", len(cf.RootFS.DiffIDs), len(layers))
	}
	var manifestLayers []v1.Descriptor
	if !opts.Uncompressed {
		m, err := img.Manifest()
		if err != nil {
			return nil, FlattenStats{}, fmt.Errorf("reading the manifest: %w", err)
		}
		manifestLayers = m.Layers
	}
	p := Progress{Layers: len(layers)}
	for _, d := range manifestLayers {
		p.AllSize += d.Size
	}
	f := NewFlattener(sink)
	// Looked up once: every gzip layer of the image goes the same way.
	var igzip string
	if !opts.GoInflate {
		igzip = igzipPath()
	}
	gzipped := false
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, FlattenStats{}, err
		}
		p.Layer = i + 1
		p.Done, p.Size = 0, 0
		src := layerSource{layer: l, diffID: cf.RootFS.DiffIDs[i], igzip: igzip}
		if manifestLayers != nil {
			src.digest = manifestLayers[i].Digest
			p.Size = manifestLayers[i].Size
			p.Digest = src.digest.String()
		} else {
			p.Digest = src.diffID.String()
		}
		if err := src.apply(ctx, f, &p, opts.Progress); err != nil {
			return nil, FlattenStats{}, fmt.Errorf("layer %d of %d (%s): %w", i+1, len(layers), p.Digest, err)
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
	layer v1.Layer
	// digest names the compressed blob; zero when read uncompressed.
	digest v1.Hash
	diffID v1.Hash
	// igzip is the igzip binary that inflates gzip; "": inflate in Go.
	igzip string
	// gzipped is set by apply if the layer was gzip.
	gzipped bool
}

func (s *layerSource) apply(ctx context.Context, f *Flattener, p *Progress, progress func(Progress)) error {
	var (
		rc  io.ReadCloser
		err error
	)
	if s.digest.Hex == "" {
		rc, err = s.layer.Uncompressed()
	} else {
		rc, err = s.layer.Compressed()
	}
	if err != nil {
		return fmt.Errorf("opening: %w", err)
	}
	defer rc.Close()

	// The producer goroutine reads, decompresses and hashes the
	// uncompressed stream; this one parses the tar and writes content,
	// which is the longer job.
	raw := &countingReader{r: rc, p: p, progress: progress}
	h := sha256.New()
	ra := newReadahead(ctx, func() (io.Reader, func() error, error) {
		r, release, gzipped, err := decompress(ctx, raw, s.igzip)
		if err != nil {
			return nil, nil, err
		}
		// Read by Flatten once ra is closed, after this goroutine ends.
		s.gzipped = gzipped
		return io.TeeReader(r, h), release, nil
	})
	defer ra.Close()
	if err := f.ApplyLayer(ra); err != nil {
		return err
	}
	// The tar end marker may be followed by padding; the digest covers it.
	if _, err := io.Copy(io.Discard, ra); err != nil {
		return fmt.Errorf("reading past the end of the tar stream: %w (the blob is truncated or corrupt)", err)
	}
	// The producer hashed the last bytes before it sent the end of the
	// stream that io.Copy saw.
	if got := hex.EncodeToString(h.Sum(nil)); got != s.diffID.Hex {
		return fmt.Errorf("uncompressed content has digest sha256:%s, but the image config says %s; the blob is corrupt or does not belong to this image (pull it again)", got, s.diffID)
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
