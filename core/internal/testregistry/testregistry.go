// Package testregistry serves an in-process OCI registry on a loopback
// address for tests, and pushes OCI layouts to it.
package testregistry

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"z.gfire.dev/gvx/core/internal/testimage"
)

// PlainHTTPAddr is loopback that, unlike 127.0.0.1, the registry client
// does not speak plain HTTP to unasked: a registry there needs --insecure.
const PlainHTTPAddr = "127.0.0.2"

// Serve starts a plain-HTTP registry listening on addr (an IP on loopback)
// until the test ends, and returns its host:port. It skips the test if
// addr cannot be listened on.
func Serve(t testing.TB, addr string) string {
	t.Helper()
	host, stop, err := Start(addr)
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(stop)
	return host
}

// Start starts a plain-HTTP registry listening on addr (an IP on
// loopback), for a program that is not a Go test (cmd/testregistry), and
// returns its host:port and the function that stops it.
func Start(addr string) (string, func(), error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return "", nil, fmt.Errorf("cannot listen on %s: %w", addr, err)
	}
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	return l.Addr().String(), srv.Close, nil
}

// Push pushes the first image of the OCI layout in dir to ref, on a
// plain-HTTP registry.
func Push(dir, ref string) error {
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return err
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return err
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(im.Manifests) == 0 {
		return fmt.Errorf("the OCI layout %s holds no image", dir)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		return err
	}
	return remote.Write(tag, img)
}

// ServeTestImage builds the tests' image (testimage.Build), serves a
// registry on addr until the test ends and pushes the image to it, and
// returns its reference.
func ServeTestImage(t testing.TB, addr string) string {
	t.Helper()
	b, err := testimage.Build()
	if err != nil {
		t.Fatal(err)
	}
	ref := Serve(t, addr) + "/gvx/test:latest"
	if err := Push(b.Layout, ref); err != nil {
		t.Fatalf("pushing the test image to the test registry: %v", err)
	}
	return ref
}
