package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
)

// requireIgzip skips, saying why, where igzip is not installed; the test
// command installs it (Debian package isal), so CI runs these.
func requireIgzip(t *testing.T) {
	t.Helper()
	if Inflater() != "igzip" {
		t.Skipf("igzip is not on PATH (or %s=go); install the Debian package isal", InflateEnv)
	}
}

// gzipped returns two concatenated gzip members holding content, as some
// layer writers produce.
func gzipped(t *testing.T, content []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	half := len(content) / 2
	for _, part := range [][]byte{content[:half], content[half:]} {
		zw := gzip.NewWriter(&buf)
		zw.Write(part)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func inflate(ctx context.Context, src io.Reader, goInflate bool) (reader io.Reader, out []byte, err error) {
	r, release, _, err := decompress(ctx, src, inflaterPath(goInflate))
	if err != nil {
		return nil, nil, err
	}
	defer release()
	out, err = io.ReadAll(r)
	return r, out, err
}

func TestInflateWithIgzip(t *testing.T) {
	requireIgzip(t)
	content := make([]byte, 3<<20)
	rand.New(rand.NewSource(1)).Read(content[:1<<20]) // part incompressible
	blob := gzipped(t, content)
	for _, goInflate := range []bool{false, true} {
		r, out, err := inflate(context.Background(), bytes.NewReader(blob), goInflate)
		if err != nil {
			t.Fatalf("goInflate=%v: %v", goInflate, err)
		}
		if _, isIgzip := r.(*igzipReader); isIgzip == goInflate {
			t.Errorf("goInflate=%v inflated with %T", goInflate, r)
		}
		if !bytes.Equal(out, content) {
			t.Errorf("goInflate=%v: inflated %d bytes that differ from the %d written", goInflate, len(out), len(content))
		}
	}
}

func TestIgzipErrors(t *testing.T) {
	requireIgzip(t)
	content := bytes.Repeat([]byte("gvx layer "), 100000)
	blob := gzipped(t, content)
	flipped := bytes.Clone(blob)
	flipped[len(flipped)/3] ^= 0xff

	t.Run("truncated", func(t *testing.T) {
		_, _, err := inflate(context.Background(), bytes.NewReader(blob[:len(blob)*3/4]), false)
		if err == nil || !strings.Contains(err.Error(), "truncated or corrupt") || strings.Contains(err.Error(), "(null)") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("flipped byte", func(t *testing.T) {
		_, _, err := inflate(context.Background(), bytes.NewReader(flipped), false)
		if err == nil || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("source fails", func(t *testing.T) {
		// A download that breaks is reported as such, not as a corrupt blob.
		broken := io.MultiReader(bytes.NewReader(blob[:len(blob)/2]), errReader{errors.New("connection reset")})
		_, _, err := inflate(context.Background(), broken, false)
		if err == nil || !strings.Contains(err.Error(), "reading: connection reset") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		// A cancelled pull is not igzip's fault: no advice to drop it.
		if _, _, err := inflate(ctx, bytes.NewReader(blob), false); !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), InflateEnv) {
			t.Fatalf("got %v, want just context.Canceled", err)
		}
	})
	t.Run("cancelled while inflating a file", func(t *testing.T) {
		// A source that knows nothing of the context, as a layout's
		// blob file: igzip is killed, and that is the cancellation.
		big := make([]byte, 8<<20)
		rand.New(rand.NewSource(4)).Read(big)
		ctx, cancel := context.WithCancel(context.Background())
		r, release, _, err := decompress(ctx, bytes.NewReader(gzipped(t, big)), inflaterPath(false))
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		// A download that stalls, as an HTTP body does, until the
		// pull is cancelled.
		ctx, cancel := context.WithCancel(context.Background())
		stalled := io.MultiReader(bytes.NewReader(blob[:1000]), ctxReader{ctx})
		r, release, _, err := decompress(ctx, stalled, inflaterPath(false))
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		cancel()
		if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
	})
}

// inflaterPath is the igzip argument of decompress: "" to inflate in Go.
func inflaterPath(goInflate bool) string {
	if goInflate {
		return ""
	}
	return igzipPath()
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// ctxReader blocks until ctx is done.
type ctxReader struct{ ctx context.Context }

func (c ctxReader) Read([]byte) (int, error) {
	<-c.ctx.Done()
	return 0, c.ctx.Err()
}

// TestInflateEnvIsReadEachTime checks that a long-lived process (Python
// with libgvx) can switch inflaters between pulls.
func TestInflateEnvIsReadEachTime(t *testing.T) {
	requireIgzip(t)
	t.Setenv(InflateEnv, "go")
	if got := Inflater(); got != "go" {
		t.Errorf("with %s=go: %q", InflateEnv, got)
	}
	t.Setenv(InflateEnv, "")
	if got := Inflater(); got != "igzip" {
		t.Errorf("with %s unset again: %q", InflateEnv, got)
	}
}
