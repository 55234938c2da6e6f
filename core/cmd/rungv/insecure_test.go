package main

import (
	"io"
	"log"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"z.gfire.dev/gvx/core/internal/testimage"
)

// TestRunPullsFromAPlainHTTPRegistryWithInsecure runs an image that must
// first be pulled from a registry that speaks plain HTTP: refused, saying
// to pass --insecure, until run is given --insecure (as pull is, and as the
// SDK passes Config.Insecure). The registry listens on 127.0.0.2, which is
// loopback but, unlike 127.0.0.1, is not one of the addresses the registry
// client speaks plain HTTP to unasked.
func TestRunPullsFromAPlainHTTPRegistryWithInsecure(t *testing.T) {
	b, err := testimage.Build()
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(b.Layout)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2 (loopback beyond 127.0.0.1): %v", err)
	}
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	reg := &registryHost{host: l.Addr().String()}
	ref, err := reg.push(t, b.Layout)
	if err != nil {
		t.Fatalf("pushing the test image (%s) to the test registry: %v", im.Manifests[0].Digest, err)
	}

	cache := t.TempDir()
	_, stderr, code := rungv(t, cache, "run", "-q", ref, "echo", "pulled")
	if code == 0 || !strings.Contains(stderr, "--insecure") {
		t.Fatalf("run from a plain-HTTP registry without --insecure: exit %d, stderr %q; want a failure that says to pass --insecure", code, stderr)
	}
	stdout, stderr, code := rungv(t, cache, "run", "-q", "--insecure", ref, "echo", "pulled")
	if code != 0 || stdout != "pulled\n" {
		t.Fatalf("run --insecure: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
