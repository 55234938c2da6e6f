package image

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
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

// Image is one image of a reference, resolved for a platform. Its manifest
// and config were read and verified against the digests that name them, so
// ID names Config; its layers are verified as Flatten reads them.
type Image struct {
	// Digest is the manifest's digest; zero for a docker archive, which
	// stores no manifest blob.
	Digest v1.Hash
	// ID is the image ID: the config's digest.
	ID v1.Hash
	// Config is the image config, parsed from the verified bytes.
	Config *v1.ConfigFile
	// Layers are the layer blobs, bottom first, one per rootfs.diff_ids
	// entry of Config.
	Layers []Layer
}

// Layer is one layer blob of an Image.
type Layer struct {
	// Blob describes the stored blob. Its digest is zero for a docker
	// archive's layers, which are stored uncompressed and named by DiffID
	// alone.
	Blob v1.Descriptor
	// DiffID is the digest of the uncompressed tar, from the config.
	DiffID v1.Hash
	// Source says where the blob is read from, for errors.
	Source string
	open   func() (io.ReadCloser, error)
}

// Open resolves ref to a single image for the wanted platform, reading and
// verifying its manifests and config. Layers are read by Flatten.
func Open(ctx context.Context, ref Reference, opts Options) (*Image, error) {
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

// imageFromManifest builds the Image the verified manifest raw describes,
// reading its config through open and verifying it. where says where a
// blob is; open opens it.
func imageFromManifest(digest v1.Hash, raw []byte, where func(v1.Hash) string, open func(v1.Hash) (io.ReadCloser, error)) (*Image, error) {
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, &BlobError{Kind: KindManifest, Digest: digest, Source: where(digest), Reason: "it is not an image manifest", Err: err}
	}
	cd := m.Config
	for _, d := range append([]v1.Descriptor{cd}, m.Layers...) {
		// A layer blob with no digest would pass for a docker archive's.
		if d.Digest.Hex == "" {
			return nil, &BlobError{Kind: KindManifest, Digest: digest, Source: where(digest), Reason: "it lists a blob with no digest"}
		}
	}
	cfgRaw, err := readJSONBlob(KindConfig, cd, where(cd.Digest), func() (io.ReadCloser, error) { return open(cd.Digest) })
	if err != nil {
		return nil, err
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(cfgRaw))
	if err != nil {
		return nil, &BlobError{Kind: KindConfig, Digest: cd.Digest, Source: where(cd.Digest), Reason: "it is not an image config", Err: err}
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("the image config lists %d layers (rootfs.diff_ids) but manifest %s lists %d; the image is malformed: rebuild it", len(cf.RootFS.DiffIDs), digest, len(m.Layers))
	}
	img := &Image{Digest: digest, ID: cd.Digest, Config: cf}
	for i, d := range m.Layers {
		if d.Size < 0 {
			return nil, &BlobError{Kind: KindLayer, Digest: d.Digest, Source: where(d.Digest), Reason: fmt.Sprintf("manifest %s gives it the size %d", digest, d.Size)}
		}
		img.Layers = append(img.Layers, Layer{
			Blob:   d,
			DiffID: cf.RootFS.DiffIDs[i],
			Source: where(d.Digest),
			open:   func() (io.ReadCloser, error) { return open(d.Digest) },
		})
	}
	return img, nil
}

func openRegistry(ctx context.Context, ref Reference, opts Options) (*Image, error) {
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
	// The registry client checks every manifest it fetches by digest (an
	// index's children, a reference pinned by digest) and the size and
	// digest of every blob; a manifest fetched by tag is named by nothing
	// but its tag. The config and layers go through the same checks as
	// any other source's.
	img, err := remote.Image(r, ropts...)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w%s", r, err, registryHint(err, opts.Insecure))
	}
	raw, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("pulling %s: reading the manifest: %w", r, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w", r, err)
	}
	repo := r.Context()
	where := func(h v1.Hash) string { return repo.Digest(h.String()).String() }
	open := func(h v1.Hash) (io.ReadCloser, error) {
		l, err := img.LayerByDigest(h)
		if err != nil {
			return nil, err
		}
		return l.Compressed()
	}
	out, err := imageFromManifest(digest, raw, where, open)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: %w", r, err)
	}
	return out, nil
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

func openLayout(ref Reference, opts Options) (*Image, error) {
	if _, err := os.Stat(ref.Path); err != nil {
		return nil, fmt.Errorf("OCI layout %q: %w (check the path: oci:DIR names a directory)", ref.Path, err)
	}
	l := layoutBlobs{dir: ref.Path}
	// index.json is the layout's root: nothing names it by digest.
	const layoutHint = " (is it an OCI image layout with index.json and oci-layout?)"
	raw, err := readRegular(filepath.Join(ref.Path, "index.json"), maxJSONBlob)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %q: %w%s", ref.Path, err, layoutHint)
	}
	im, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("OCI layout %q: reading index.json: %w%s", ref.Path, err, layoutHint)
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
		return nil, fmt.Errorf("OCI layout %q is empty: its index.json lists no image (is it the layout you meant?)", ref.Path)
	case len(candidates) > 1:
		// Several platforms of one image are fine; several images are
		// ambiguous.
		img, err := l.pickPlatform(candidates, opts.platform())
		var berr *BlobError
		switch {
		case err == nil:
			return img, nil
		case errors.As(err, &berr):
			return nil, fmt.Errorf("OCI layout %q: %w", ref.Path, err)
		}
		return nil, fmt.Errorf("OCI layout %q holds %d images; pick one with oci:DIR:TAG or oci:DIR@DIGEST (tags: %s)", ref.Path, len(candidates), layoutNames(im))
	}
	img, err := l.image(candidates[0], opts.platform())
	if err != nil {
		return nil, fmt.Errorf("OCI layout %q: %w", ref.Path, err)
	}
	return img, nil
}

// layoutBlobs reads the blobs of an OCI layout.
type layoutBlobs struct{ dir string }

// path is where the layout keeps blob h. A parsed v1.Hash has only hex
// digits after a known algorithm name, so the path stays inside blobs/.
func (l layoutBlobs) path(h v1.Hash) string {
	return filepath.Join(l.dir, "blobs", h.Algorithm, h.Hex)
}

func (l layoutBlobs) open(h v1.Hash) (io.ReadCloser, error) {
	return openRegular(l.path(h))
}

// image returns the image d names, choosing a platform if d is an index.
func (l layoutBlobs) image(d v1.Descriptor, p v1.Platform) (*Image, error) {
	open := func() (io.ReadCloser, error) { return l.open(d.Digest) }
	if d.MediaType.IsIndex() {
		raw, err := readJSONBlob(KindIndex, d, l.path(d.Digest), open)
		if err != nil {
			return nil, err
		}
		im, err := v1.ParseIndexManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, &BlobError{Kind: KindIndex, Digest: d.Digest, Source: l.path(d.Digest), Reason: "it is not an image index", Err: err}
		}
		return l.pickPlatform(im.Manifests, p)
	}
	if !d.MediaType.IsImage() {
		return nil, fmt.Errorf("manifest %s has media type %q, which is not an image; want an OCI or Docker image manifest or index (the layout is malformed: write it again)", d.Digest, d.MediaType)
	}
	raw, err := readJSONBlob(KindManifest, d, l.path(d.Digest), open)
	if err != nil {
		return nil, err
	}
	return imageFromManifest(d.Digest, raw, l.path, l.open)
}

func (l layoutBlobs) pickPlatform(ds []v1.Descriptor, p v1.Platform) (*Image, error) {
	var seen []string
	for _, d := range ds {
		if d.Platform == nil {
			continue
		}
		seen = append(seen, d.Platform.String())
		if d.Platform.OS == p.OS && d.Platform.Architecture == p.Architecture && (p.Variant == "" || d.Platform.Variant == p.Variant) {
			return l.image(d, p)
		}
	}
	return nil, fmt.Errorf("no image for platform %s (available: %s); gvx runs linux/amd64 images: pick an image built for it", p.String(), strings.Join(seen, ", "))
}

// openRegular opens a file the user named for reading, refusing anything
// but a regular file without blocking on it (a FIFO would block open).
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is a %s, not a regular file", path, fileKind(st.Mode()))
	}
	return f, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// readRegular reads the regular file path, refusing one over limit bytes.
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is over %d bytes", path, limit)
	}
	return b, nil
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

func openArchive(ref Reference) (*Image, error) {
	if _, err := os.Stat(ref.Path); err != nil {
		return nil, fmt.Errorf("docker archive %q: %w (check the path: docker-archive:FILE.tar names a `docker save` tarball)", ref.Path, err)
	}
	var tag *name.Tag
	if ref.Name != "" {
		t, err := name.NewTag(ref.Name)
		if err != nil {
			return nil, fmt.Errorf("docker archive %q: %q is not a tag: %w", ref.Path, ref.Name, err)
		}
		tag = &t
	}
	const hint = " (is it a `docker save` tarball? name the image with docker-archive:FILE.tar:REPO:TAG when it holds several)"
	raw, err := readArchiveEntry(ref.Path, "manifest.json")
	if err != nil {
		return nil, fmt.Errorf("docker archive %q: %w%s", ref.Path, err, hint)
	}
	var m tarball.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("docker archive %q: manifest.json: %w%s", ref.Path, err, hint)
	}
	desc, err := archiveEntry(m, tag)
	if err != nil {
		return nil, fmt.Errorf("docker archive %q: %w%s", ref.Path, err, hint)
	}
	where := func(file string) string { return ref.Path + ", entry " + file }
	if raw, err = readArchiveEntry(ref.Path, desc.Config); err != nil {
		return nil, fmt.Errorf("docker archive %q: reading the config that manifest.json names: %w (the archive is incomplete or malformed: save it again)", ref.Path, err)
	}
	// A docker archive has no manifest blob: the config is named by its
	// file name, where that is a digest (Docker writes HEX.json, or
	// blobs/sha256/HEX since Docker 25; go-containerregistry sha256:HEX),
	// and the layers by the config's diff_ids, which Flatten checks.
	id, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	if named, ok := digestFromName(desc.Config); ok {
		br, err := newBlobReader(bytes.NewReader(raw), KindConfig, v1.Descriptor{Digest: named, Size: int64(len(raw))}, where(desc.Config))
		if err != nil {
			return nil, err
		}
		if err := br.finish(); err != nil {
			return nil, err
		}
		id = named
	}
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, &BlobError{Kind: KindConfig, Digest: id, Source: where(desc.Config), Reason: "it is not an image config", Err: err}
	}
	if len(cf.RootFS.DiffIDs) != len(desc.Layers) {
		return nil, fmt.Errorf("docker archive %q: the image config lists %d layers (rootfs.diff_ids) but manifest.json %d; the archive is malformed: save it again", ref.Path, len(cf.RootFS.DiffIDs), len(desc.Layers))
	}
	img := &Image{ID: id, Config: cf}
	for i, file := range desc.Layers {
		img.Layers = append(img.Layers, Layer{
			DiffID: cf.RootFS.DiffIDs[i],
			Source: where(file),
			open:   func() (io.ReadCloser, error) { return openArchiveEntry(ref.Path, file) },
		})
	}
	return img, nil
}

// maxArchiveLinks bounds the links followed to one archive entry.
const maxArchiveLinks = 8

// openArchiveEntry opens the entry file of the tar archive, following the
// links docker save writes for a layer that appears twice.
func openArchiveEntry(archive, file string) (io.ReadCloser, error) {
	for range maxArchiveLinks {
		f, err := openRegular(archive)
		if err != nil {
			return nil, err
		}
		tr := tar.NewReader(f)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				f.Close()
				return nil, fmt.Errorf("the archive has no entry %s", file)
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("looking for %s: %w", file, err)
			}
			if path.Clean(hdr.Name) != path.Clean(file) {
				continue
			}
			switch hdr.Typeflag {
			case tar.TypeSymlink:
				file = path.Join(path.Dir(file), hdr.Linkname)
			case tar.TypeLink:
				file = hdr.Linkname
			default:
				return struct {
					io.Reader
					io.Closer
				}{tr, f}, nil
			}
			f.Close()
			break
		}
	}
	return nil, fmt.Errorf("entry %s: more than %d links", file, maxArchiveLinks)
}

// readArchiveEntry reads a small entry of a tar archive.
func readArchiveEntry(archive, file string) ([]byte, error) {
	rc, err := openArchiveEntry(archive, file)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxJSONBlob+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	if len(b) > maxJSONBlob {
		return nil, fmt.Errorf("entry %s is over %d bytes", file, maxJSONBlob)
	}
	return b, nil
}

// archiveEntry finds the image of a docker archive's manifest.json that
// tarball.Image reads: the only one, or the one tagged tag.
func archiveEntry(m tarball.Manifest, tag *name.Tag) (*tarball.Descriptor, error) {
	if tag == nil {
		if len(m) != 1 {
			return nil, fmt.Errorf("manifest.json lists %d images", len(m))
		}
		return &m[0], nil
	}
	for i := range m {
		for _, s := range m[i].RepoTags {
			if t, err := name.NewTag(s); err == nil && t.Name() == tag.Name() {
				return &m[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no image tagged %s", tag)
}

// digestFromName parses the digest a docker archive's config file name
// carries, if it carries one.
func digestFromName(file string) (v1.Hash, bool) {
	if h, err := v1.NewHash(file); err == nil {
		return h, true
	}
	base := path.Base(file)
	if hx, ok := strings.CutSuffix(base, ".json"); ok && path.Dir(file) == "." {
		if h, err := v1.NewHash("sha256:" + hx); err == nil {
			return h, true
		}
	}
	if dir := path.Dir(file); path.Dir(dir) == "blobs" {
		if h, err := v1.NewHash(path.Base(dir) + ":" + base); err == nil {
			return h, true
		}
	}
	return v1.Hash{}, false
}
