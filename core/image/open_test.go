package image

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

func TestParseReference(t *testing.T) {
	cases := []struct {
		in   string
		want Reference
	}{
		{"busybox", Reference{Transport: Registry, Name: "busybox"}},
		{"127.0.0.1:5000/x/y:tag", Reference{Transport: Registry, Name: "127.0.0.1:5000/x/y:tag"}},
		{"oci:/a/b", Reference{Transport: OCILayout, Path: "/a/b"}},
		{"oci:/a/b:v1", Reference{Transport: OCILayout, Path: "/a/b", Tag: "v1"}},
		{"oci:/a:b/c", Reference{Transport: OCILayout, Path: "/a:b/c"}},
		{"oci:rel/dir@sha256:abc", Reference{Transport: OCILayout, Path: "rel/dir", Digest: "sha256:abc"}},
		{"docker-archive:/x/img.tar", Reference{Transport: DockerArchive, Path: "/x/img.tar"}},
		{"docker-archive:/x/img.tar:repo/app:v2", Reference{Transport: DockerArchive, Path: "/x/img.tar", Name: "repo/app:v2"}},
	}
	for _, c := range cases {
		got, err := ParseReference(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseReference(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
			continue
		}
		if back, _ := ParseReference(got.String()); back != got {
			t.Errorf("%q does not round-trip through String(): %q", c.in, got.String())
		}
	}
	for _, bad := range []string{"", "oci:", "oci:/x@nodigest", "docker-archive:", "https://reg/x"} {
		if _, err := ParseReference(bad); err == nil {
			t.Errorf("ParseReference(%q) succeeded", bad)
		}
	}
}

// TestOpenPicksPlatform opens a multi-platform index from an OCI layout.
func TestOpenPicksPlatform(t *testing.T) {
	amd, err := random.Image(100, 1)
	if err != nil {
		t.Fatal(err)
	}
	arm, err := random.Image(100, 1)
	if err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	dir := filepath.Join(t.TempDir(), "oci")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: "multi"})); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ref, _ := ParseReference("oci:" + dir + ":multi")
	for _, c := range []struct {
		platform v1.Platform
		want     v1.Image
	}{{v1.Platform{}, amd}, {v1.Platform{OS: "linux", Architecture: "arm64"}, arm}} {
		img, err := Open(ctx, ref, Options{Platform: c.platform})
		if err != nil {
			t.Fatal(err)
		}
		got := img.Digest
		want, _ := c.want.Digest()
		if got != want {
			t.Errorf("platform %q: got manifest %s, want %s", c.platform.String(), got, want)
		}
	}
	_, err = Open(ctx, ref, Options{Platform: v1.Platform{OS: "linux", Architecture: "s390x"}})
	if err == nil || !strings.Contains(err.Error(), "available: linux/arm64, linux/amd64") {
		t.Errorf("missing platform: %v", err)
	}
}
