// Package store is gvx's content-addressed image cache: one read-only EROFS
// root filesystem plus metadata per image, keyed by image ID (the digest of
// the image config, which covers every layer's uncompressed digest), shared
// by every sandbox on the machine through the page cache.
//
// Layout under the root ($GVX_CACHE, default ~/.cache/gvx):
//
//	images/<hex>/rootfs.erofs   the root filesystem
//	images/<hex>/image.json     ID, runtime config, xattrs, statistics
//	refs.json                   reference → image ID
//	tmp/                        pulls in progress
//	locks/                      per-image and refs locks (flock)
//
// Several processes may pull, list and remove at once: an image is built in
// tmp/ and renamed into place whole, a per-image lock keeps two processes
// from converting the same image twice, and refs.json is replaced
// atomically under its own lock. A reader never sees a torn file.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/atomicfile"
	"z.gfire.dev/gvx/core/internal/flock"
)

const (
	imagesDir   = "images"
	tmpDir      = "tmp"
	locksDir    = "locks"
	refsFile    = "refs.json"
	refsLock    = "refs.lock"
	erofsName   = "rootfs.erofs"
	metaName    = "image.json"
	metaVersion = 1
)

// Store is an image cache rooted at a directory.
type Store struct {
	root string
}

// DefaultRoot returns $GVX_CACHE, or ~/.cache/gvx.
func DefaultRoot() string {
	if d := os.Getenv("GVX_CACHE"); d != "" {
		return d
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "gvx")
	}
	return filepath.Join(os.TempDir(), "gvx-cache")
}

// Open opens (creating if needed) the store at root; "" means DefaultRoot.
// A root the caller gave is the caller's to explain (a flag, an option);
// only for the default does the error say how to choose another.
func Open(root string) (*Store, error) {
	fix := ""
	if root == "" {
		root = DefaultRoot()
		fix = " (set GVX_CACHE to a writable directory)"
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(abs); err == nil && !st.IsDir() {
		return nil, fmt.Errorf("the image cache at %s is not a directory%s", abs, fix)
	}
	for _, d := range []string{imagesDir, tmpDir, locksDir} {
		if err := os.MkdirAll(filepath.Join(abs, d), 0o755); err != nil {
			return nil, fmt.Errorf("creating the image cache at %s: %w%s", abs, err, fix)
		}
	}
	return &Store{root: abs}, nil
}

// Root returns the store's directory.
func (s *Store) Root() string { return s.root }

// Xattr is an extended attribute a layer gave a file. EROFS images for
// gVisor cannot carry xattrs, so the store keeps them here for the sandbox
// to apply.
type Xattr struct {
	Path  string `json:"path"`
	Name  string `json:"name"`
	Value []byte `json:"value"`
}

// Image is a cached image.
type Image struct {
	ID      string       `json:"id"` // sha256:<hex> of the image config
	Config  image.Config `json:"config"`
	Created time.Time    `json:"created"`
	Pulled  time.Time    `json:"pulled"`
	// Size is the EROFS image's length in bytes.
	Size   int64   `json:"size"`
	Layers int     `json:"layers"`
	Files  uint64  `json:"files"` // inodes in the image
	Xattrs []Xattr `json:"xattrs,omitempty"`
	// Refs are the references that name this image (filled on read).
	Refs []string `json:"-"`
	// Dir is the image's directory in the store (filled on read).
	Dir string `json:"-"`

	Version int `json:"version"`
}

// ErofsPath returns the path of the image's root filesystem.
func (img *Image) ErofsPath() string { return filepath.Join(img.Dir, erofsName) }

// ShortID returns the first 12 hex digits of the ID, as docker shows them.
func (img *Image) ShortID() string { return shortID(img.ID) }

func shortID(id string) string {
	hex := strings.TrimPrefix(id, "sha256:")
	if len(hex) > 12 {
		return hex[:12]
	}
	return hex
}

func (s *Store) imageDir(id string) string {
	return filepath.Join(s.root, imagesDir, strings.TrimPrefix(id, "sha256:"))
}

func (s *Store) imageLock(id string) string {
	return filepath.Join(s.root, locksDir, strings.TrimPrefix(id, "sha256:")+".lock")
}

// load reads an image's metadata; os.ErrNotExist if it is not cached.
func (s *Store) load(id string) (*Image, error) {
	dir := s.imageDir(id)
	b, err := os.ReadFile(filepath.Join(dir, metaName))
	if err != nil {
		return nil, err
	}
	var img Image
	if err := json.Unmarshal(b, &img); err != nil {
		return nil, fmt.Errorf("image %s: corrupt %s: %w (remove it with `rungv rmi %s`)", shortID(id), metaName, err, shortID(id))
	}
	if img.Version != metaVersion {
		return nil, fmt.Errorf("image %s was cached by another gvx version (metadata version %d, want %d): remove it with `rungv rmi %s` and pull again", shortID(id), img.Version, metaVersion, shortID(id))
	}
	img.Dir = dir
	return &img, nil
}

// refs reads refs.json.
func (s *Store) refs() (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(s.root, refsFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f struct {
		Refs map[string]string `json:"refs"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("corrupt %s: %w (delete the file; images stay cached, references are lost)", filepath.Join(s.root, refsFile), err)
	}
	if f.Refs == nil {
		f.Refs = map[string]string{}
	}
	return f.Refs, nil
}

// updateRefs applies fn to refs.json under the refs lock and replaces the
// file atomically.
func (s *Store) updateRefs(ctx context.Context, fn func(map[string]string) error) error {
	l, err := flock.Acquire(ctx, filepath.Join(s.root, locksDir, refsLock))
	if err != nil {
		return err
	}
	defer l.Release()
	refs, err := s.refs()
	if err != nil {
		return err
	}
	if err := fn(refs); err != nil {
		return err
	}
	b, err := json.MarshalIndent(struct {
		Version int               `json:"version"`
		Refs    map[string]string `json:"refs"`
	}{metaVersion, refs}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.root, refsFile), b)
}

// writeFileAtomic writes b to a temporary file beside path, syncs it and
// renames it over path.
func writeFileAtomic(path string, b []byte) error {
	return atomicfile.Write(path, func(f *os.File) error {
		if _, err := f.Write(b); err != nil {
			return err
		}
		return f.Sync()
	})
}

// List returns every cached image, newest pull first, with its references.
func (s *Store) List() ([]*Image, error) {
	entries, err := os.ReadDir(filepath.Join(s.root, imagesDir))
	if err != nil {
		return nil, err
	}
	refs, err := s.refs()
	if err != nil {
		return nil, err
	}
	byID := map[string][]string{}
	for ref, id := range refs {
		byID[id] = append(byID[id], ref)
	}
	var out []*Image
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		img, err := s.load("sha256:" + e.Name())
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		img.Refs = byID[img.ID]
		sort.Strings(img.Refs)
		out = append(out, img)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Pulled.Equal(out[j].Pulled) {
			return out[i].Pulled.After(out[j].Pulled)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Get finds a cached image by reference (as pulled), full ID, or a unique
// prefix of the ID's hex digits.
func (s *Store) Get(refOrID string) (*Image, error) {
	id, err := s.resolve(refOrID)
	if err != nil {
		return nil, err
	}
	img, err := s.load(id)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("image %s is referenced but no longer cached: pull it again", refOrID)
	}
	if err != nil {
		return nil, err
	}
	refs, err := s.refs()
	if err != nil {
		return nil, err
	}
	for ref, rid := range refs {
		if rid == img.ID {
			img.Refs = append(img.Refs, ref)
		}
	}
	sort.Strings(img.Refs)
	return img, nil
}

// ErrNotFound reports that no cached image matches.
var ErrNotFound = errors.New("no such image in the cache")

func (s *Store) resolve(refOrID string) (string, error) {
	refs, err := s.refs()
	if err != nil {
		return "", err
	}
	if id, ok := refs[refOrID]; ok {
		return id, nil
	}
	if norm, err := normalizeRef(refOrID); err == nil {
		if id, ok := refs[norm]; ok {
			return id, nil
		}
	}
	hex := strings.TrimPrefix(refOrID, "sha256:")
	if len(hex) < 4 || strings.Trim(hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%w: %q (see `rungv images`; pull it with `rungv pull %s`)", ErrNotFound, refOrID, refOrID)
	}
	entries, err := os.ReadDir(filepath.Join(s.root, imagesDir))
	if err != nil {
		return "", err
	}
	var matches []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), hex) {
			matches = append(matches, "sha256:"+e.Name())
		}
	}
	switch len(matches) {
	case 0:
		return "", fmt.Errorf("%w: %q (see `rungv images`)", ErrNotFound, refOrID)
	case 1:
		return matches[0], nil
	}
	return "", fmt.Errorf("image ID prefix %q is ambiguous (%d images); give more digits", refOrID, len(matches))
}

// normalizeRef makes file-based references absolute, so the same image
// pulled from two working directories has one reference.
func normalizeRef(s string) (string, error) {
	ref, err := image.ParseReference(s)
	if err != nil {
		return "", err
	}
	if ref.Transport != image.Registry {
		if ref.Path, err = filepath.Abs(ref.Path); err != nil {
			return "", err
		}
	}
	return ref.String(), nil
}
