package gvx

import (
	"context"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/spec"
)

// TestInsecurePullsFromAPlainHTTPRegistry starts a sandbox whose image must
// first be pulled from a registry that speaks plain HTTP: New fails, saying
// to pass --insecure, until Config.Insecure is set. The registry listens on
// 127.0.0.2, loopback that the registry client, unlike with 127.0.0.1, does
// not speak plain HTTP to unasked.
func TestInsecurePullsFromAPlainHTTPRegistry(t *testing.T) {
	b, err := testimage.Build()
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
	ref := l.Addr().String() + "/gvx/test:latest"
	pushLayout(t, b.Layout, ref)

	cfg := Config{Sandbox: spec.Sandbox{Image: ref, KeepAlive: true}, Rungv: rungvBin, Cache: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if sb, err := New(ctx, cfg); err == nil {
		sb.Close()
		t.Fatal("New pulled from a plain-HTTP registry without Insecure")
	} else if !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("New without Insecure: %v; want an error that says to pass --insecure", err)
	}
	cfg.Insecure = true
	sb := newSandbox(t, cfg)
	if res := sh(t, sb, "echo pulled", nil); string(res.Stdout) != "pulled\n" {
		t.Fatalf("exec in the pulled image: %+v", res)
	}
}

// pushLayout pushes the image of the OCI layout dir to ref, a plain-HTTP
// registry.
func pushLayout(t *testing.T, dir, ref string) {
	t.Helper()
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(dir)
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
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("pushing the test image to %s: %v", ref, err)
	}
}
