// Package image turns OCI image references into flattened filesystem trees.
//
// A reference names an image in a registry, an OCI layout directory or a
// `docker save` tarball (ParseReference). Open resolves it to one image for
// the wanted platform, and Flatten streams its layers, in order, into a
// data sink while building the metadata tree (core/fstree), with OCI
// whiteout semantics and refusal of hostile tar entries. Nothing is written
// to the host filesystem here; the sink decides where content goes.
package image

import (
	"fmt"
	"strings"
)

// Transport says where a reference points.
type Transport int

const (
	// Registry is a registry reference such as
	// docker.io/library/python:3.11-slim or 127.0.0.1:5000/x@sha256:….
	Registry Transport = iota
	// OCILayout is an OCI image layout directory: oci:DIR[:TAG|@DIGEST].
	OCILayout
	// DockerArchive is a `docker save` tarball: docker-archive:FILE[:REF].
	DockerArchive
)

// Reference is a parsed image reference.
type Reference struct {
	Transport Transport
	// Name is the registry reference (Registry) or the image reference
	// inside a docker archive (DockerArchive, optional).
	Name string
	// Path is the layout directory or archive file.
	Path string
	// Tag selects a layout entry by its org.opencontainers.image.ref.name
	// annotation (OCILayout, optional).
	Tag string
	// Digest selects a layout entry by manifest digest (OCILayout,
	// optional).
	Digest string
}

const (
	ociPrefix     = "oci:"
	archivePrefix = "docker-archive:"
)

// ParseReference parses the reference forms gvx accepts:
//
//	REGISTRY-REF                      e.g. busybox, 127.0.0.1:5000/x:tag, repo@sha256:…
//	oci:DIR[:TAG|@DIGEST]             an OCI image layout directory
//	docker-archive:FILE.tar[:REF]     a `docker save` tarball
func ParseReference(s string) (Reference, error) {
	switch {
	case s == "":
		return Reference{}, fmt.Errorf("empty image reference: give a registry reference (busybox:latest), oci:DIR or docker-archive:FILE.tar")
	case strings.HasPrefix(s, ociPrefix):
		rest := s[len(ociPrefix):]
		r := Reference{Transport: OCILayout}
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			r.Path, r.Digest = rest[:i], rest[i+1:]
			if !strings.Contains(r.Digest, ":") {
				return Reference{}, fmt.Errorf("image reference %q: %q is not a digest (want ALGORITHM:HEX, e.g. sha256:…)", s, r.Digest)
			}
		} else {
			r.Path, r.Tag = splitTag(rest)
		}
		if r.Path == "" {
			return Reference{}, fmt.Errorf("image reference %q names no directory: use oci:DIR[:TAG|@DIGEST]", s)
		}
		return r, nil
	case strings.HasPrefix(s, archivePrefix):
		rest := s[len(archivePrefix):]
		r := Reference{Transport: DockerArchive, Path: rest}
		// The path ends at ".tar" when a REF follows; otherwise the whole
		// rest is the path.
		if i := strings.Index(rest, ".tar:"); i >= 0 {
			r.Path, r.Name = rest[:i+len(".tar")], rest[i+len(".tar:"):]
		}
		if r.Path == "" {
			return Reference{}, fmt.Errorf("image reference %q names no file: use docker-archive:FILE.tar[:REF]", s)
		}
		return r, nil
	case strings.Contains(s, "://"):
		return Reference{}, fmt.Errorf("image reference %q: drop the URL scheme (write 127.0.0.1:5000/x:tag, and --insecure for a plain-HTTP registry)", s)
	}
	return Reference{Transport: Registry, Name: s}, nil
}

// splitTag splits DIR[:TAG] where DIR may itself contain colons but TAG
// contains no slash.
func splitTag(s string) (path, tag string) {
	i := strings.LastIndex(s, ":")
	if i < 0 || strings.Contains(s[i+1:], "/") {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// String returns the reference in the form ParseReference accepts.
func (r Reference) String() string {
	switch r.Transport {
	case OCILayout:
		switch {
		case r.Digest != "":
			return ociPrefix + r.Path + "@" + r.Digest
		case r.Tag != "":
			return ociPrefix + r.Path + ":" + r.Tag
		}
		return ociPrefix + r.Path
	case DockerArchive:
		if r.Name != "" {
			return archivePrefix + r.Path + ":" + r.Name
		}
		return archivePrefix + r.Path
	}
	return r.Name
}
