package image

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// refNameAnnotation names an image inside an OCI layout's index.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// DefaultPlatform is what gvx runs: the Sentry is built for linux/amd64.
var DefaultPlatform = v1.Platform{OS: "linux", Architecture: "amd64"}

// Options control how a reference is resolved.
type Options struct {
	// Insecure allows plain HTTP (and unverified TLS) for the registry.
	Insecure bool
	// Platform selects the image from a multi-platform index; zero means
	// DefaultPlatform.
	Platform v1.Platform
	// Keychain supplies registry credentials; nil means the Docker
	// keychain (~/.docker/config.json and credential helpers).
	Keychain authn.Keychain
	// Transport is the HTTP transport for registries; nil means the
	// default.
	Transport http.RoundTripper
}

func (o Options) platform() v1.Platform {
	if o.Platform.OS == "" {
		return DefaultPlatform
	}
	return o.Platform
}

// Open resolves ref to a single image for the wanted platform. Nothing is
// downloaded beyond the manifests and the config; layers are read by
// Flatten.
func Open(ctx context.Context, ref Reference, opts Options) (v1.Image, error) {
	switch ref.Transport {
	case Registry:
		return openRegistry(ctx, ref, opts)
	case OCILayout:
		return openLayout(ref, opts)
	case DockerArchive:
		return openArchive(ref)
	}
	return nil, fmt.Errorf("image reference %q: unknown transport %d", ref, ref.Transport)
}

func openRegistry(ctx context.Context, ref Reference, opts Options) (v1.Image, error) {
	var nameOpts []name.Option
	if opts.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.ParseReference(ref.Name, nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("image reference %q is not valid: %w", ref.Name, err)
	}
	keychain := opts.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(keychain),
		remote.WithPlatform(opts.platform()),
	}
	if opts.Transport != nil {
		ropts = append(ropts, remote.WithTransport(opts.Transport))
	}
	img, err := remote.Image(r, ropts...)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w%s", r, err, registryHint(err, opts.Insecure))
	}
	return img, nil
}

// registryHint says what to try for common registry failures.
func registryHint(err error, insecure bool) string {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch terr.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return " (log in with `docker login`, or put credentials in ~/.docker/config.json)"
		case http.StatusNotFound:
			return " (check the repository name and tag)"
		}
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "server gave HTTP response to HTTPS client") && !insecure:
		return " (the registry speaks plain HTTP: pass --insecure)"
	case strings.Contains(msg, "no child with platform"):
		return " (the image has no linux/amd64 variant; gvx runs linux/amd64 images)"
	}
	return ""
}

func openLayout(ref Reference, opts Options) (v1.Image, error) {
	if _, err := os.Stat(ref.Path); err != nil {
		return nil, fmt.Errorf("OCI layout %q: %w", ref.Path, err)
	}
	p, err := layout.FromPath(ref.Path)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %q: %w (is it an OCI image layout with index.json and oci-layout?)", ref.Path, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %q: reading index.json: %w", ref.Path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %q: reading index.json: %w", ref.Path, err)
	}
	var candidates []v1.Descriptor
	for _, d := range im.Manifests {
		switch {
		case ref.Digest != "":
			if d.Digest.String() == ref.Digest {
				candidates = append(candidates, d)
			}
		case ref.Tag != "":
			if d.Annotations[refNameAnnotation] == ref.Tag || strings.HasSuffix(d.Annotations[refNameAnnotation], ":"+ref.Tag) {
				candidates = append(candidates, d)
			}
		default:
			candidates = append(candidates, d)
		}
	}
	switch {
	case len(candidates) == 0 && ref.Digest != "":
		return nil, fmt.Errorf("OCI layout %q has no manifest %s", ref.Path, ref.Digest)
	case len(candidates) == 0 && ref.Tag != "":
		return nil, fmt.Errorf("OCI layout %q has no image tagged %q; it has: %s", ref.Path, ref.Tag, layoutNames(im))
	case len(candidates) == 0:
		return nil, fmt.Errorf("OCI layout %q is empty", ref.Path)
	case len(candidates) > 1:
		// Several platforms of one image are fine; several images are
		// ambiguous.
		if img, err := pickPlatform(idx, candidates, opts.platform()); err == nil {
			return img, nil
		}
		return nil, fmt.Errorf("OCI layout %q holds %d images; pick one with oci:DIR:TAG or oci:DIR@DIGEST (tags: %s)", ref.Path, len(candidates), layoutNames(im))
	}
	return descriptorImage(idx, candidates[0], opts.platform())
}

// descriptorImage returns the image d names, choosing a platform if d is an
// index.
func descriptorImage(idx v1.ImageIndex, d v1.Descriptor, p v1.Platform) (v1.Image, error) {
	if d.MediaType.IsIndex() {
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		cm, err := child.IndexManifest()
		if err != nil {
			return nil, err
		}
		return pickPlatform(child, cm.Manifests, p)
	}
	if !d.MediaType.IsImage() {
		return nil, fmt.Errorf("manifest %s has media type %q, which is not an image", d.Digest, d.MediaType)
	}
	return idx.Image(d.Digest)
}

func pickPlatform(idx v1.ImageIndex, ds []v1.Descriptor, p v1.Platform) (v1.Image, error) {
	var seen []string
	for _, d := range ds {
		if d.Platform == nil {
			continue
		}
		seen = append(seen, d.Platform.String())
		if d.Platform.OS == p.OS && d.Platform.Architecture == p.Architecture && (p.Variant == "" || d.Platform.Variant == p.Variant) {
			return descriptorImage(idx, d, p)
		}
	}
	return nil, fmt.Errorf("no image for platform %s (available: %s)", p.String(), strings.Join(seen, ", "))
}

func layoutNames(im *v1.IndexManifest) string {
	var names []string
	for _, d := range im.Manifests {
		if n := d.Annotations[refNameAnnotation]; n != "" {
			names = append(names, n)
		} else {
			names = append(names, "@"+d.Digest.String())
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func openArchive(ref Reference) (v1.Image, error) {
	if _, err := os.Stat(ref.Path); err != nil {
		return nil, fmt.Errorf("docker archive %q: %w", ref.Path, err)
	}
	var tag *name.Tag
	if ref.Name != "" {
		t, err := name.NewTag(ref.Name)
		if err != nil {
			return nil, fmt.Errorf("docker archive %q: %q is not a tag: %w", ref.Path, ref.Name, err)
		}
		tag = &t
	}
	img, err := tarball.ImageFromPath(ref.Path, tag)
	if err != nil {
		return nil, fmt.Errorf("docker archive %q: %w (is it a `docker save` tarball? name the image with docker-archive:FILE.tar:REPO:TAG when it holds several)", ref.Path, err)
	}
	return img, nil
}
