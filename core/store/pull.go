package store

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"z.gfire.dev/gvx/core/erofs"
	"z.gfire.dev/gvx/core/fstree"
	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/flock"
)

// EventKind says what a pull Event reports.
type EventKind int

const (
	// EventResolved: the reference resolved to image ID.
	EventResolved EventKind = iota
	// EventCached: the image was already in the cache; nothing to do.
	EventCached
	// EventWaiting: another process is converting the same image.
	EventWaiting
	// EventLayer: layer progress (Progress is set).
	EventLayer
	// EventWriting: all layers read; writing the metadata.
	EventWriting
	// EventDone: the image is in the cache (Image is set).
	EventDone
)

// Event reports pull progress.
type Event struct {
	Kind     EventKind
	Ref      string
	ID       string
	Progress image.Progress
	Image    *Image
	Stats    PullStats
}

// PullStats describes a conversion.
type PullStats struct {
	Duration   time.Duration
	Entries    int // tar entries read
	Files      uint64
	XattrFiles int
	DeadBlocks uint32 // content later layers replaced, squeezed out
	// GzipInflater is what inflated gzip layers: "igzip", "go", or empty
	// when no layer was gzip.
	GzipInflater string
}

// PullOptions control Pull.
type PullOptions struct {
	image.Options
	// Progress receives events; it may be called from several
	// goroutines, never concurrently.
	Progress func(Event)
	// GoInflate inflates gzip layers in this process even where igzip is
	// installed (image.Inflater).
	GoInflate bool
}

// Pull resolves ref, converts the image into an EROFS root filesystem if
// it is not cached yet, records ref → ID, and returns the cached image.
func (s *Store) Pull(ctx context.Context, refString string, opts PullOptions) (*Image, error) {
	emit := func(e Event) {
		if opts.Progress != nil {
			opts.Progress(e)
		}
	}
	ref, err := image.ParseReference(refString)
	if err != nil {
		return nil, err
	}
	if ref.Transport != image.Registry {
		if ref.Path, err = filepath.Abs(ref.Path); err != nil {
			return nil, err
		}
	}
	refKey := ref.String()
	img, err := image.Open(ctx, ref, opts.Options)
	if err != nil {
		return nil, err
	}
	// The ID is the digest the config was verified against: a config
	// changed under its name fails in Open and never meets the cache entry
	// of the real one.
	id := img.ID.String()
	emit(Event{Kind: EventResolved, Ref: refKey, ID: id})

	job := conversion{img: img, id: id, refKey: refKey, emit: emit, goInflate: opts.GoInflate}
	if err := s.ensure(ctx, job); err != nil {
		return nil, err
	}
	return s.Get(id)
}

// conversion is one image a Pull makes sure of.
type conversion struct {
	img       *image.Image
	id        string // the image ID (config digest)
	refKey    string // the reference as recorded in the cache
	emit      func(Event)
	goInflate bool
}

// ensure makes sure image job.id is cached — converting job.img if it is
// not — and records job.refKey for it, all under the per-image lock, so
// that a concurrent rmi or prune never deletes an image between its
// conversion and its reference.
func (s *Store) ensure(ctx context.Context, job conversion) error {
	id, refKey, emit := job.id, job.refKey, job.emit
	lockPath := s.imageLock(id)
	lock, held, err := flock.TryAcquire(lockPath)
	if err != nil {
		return err
	}
	if held {
		emit(Event{Kind: EventWaiting, Ref: refKey, ID: id})
		if lock, err = flock.Acquire(ctx, lockPath); err != nil {
			return err
		}
	}
	defer lock.Release()
	cached, err := s.load(id)
	switch {
	case err == nil:
		emit(Event{Kind: EventCached, Ref: refKey, ID: id, Image: cached})
	case errors.Is(err, os.ErrNotExist):
		if _, err := s.convert(ctx, job); err != nil {
			return err
		}
	default:
		return err
	}
	if err := s.updateRefs(ctx, func(refs map[string]string) error {
		refs[refKey] = id
		return nil
	}); err != nil {
		return fmt.Errorf("recording reference %s: %w", refKey, err)
	}
	return nil
}

// convert builds the image in tmp/ and renames it into images/.
//
// Preconditions: the per-image lock is held.
func (s *Store) convert(ctx context.Context, job conversion) (*Image, error) {
	img, id, refKey, emit := job.img, job.id, job.refKey, job.emit
	start := time.Now()
	cf := img.Config
	if cf.OS != "" && cf.OS != "linux" {
		return nil, fmt.Errorf("image %s is for %s/%s; gvx runs linux/amd64 images", refKey, cf.OS, cf.Architecture)
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.root, tmpDir), shortID(id)+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp) // after a successful rename there is nothing left
	f, err := os.OpenFile(filepath.Join(tmp, erofsName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	w := erofs.NewWriter(f)
	flush := startFlusher(f)
	defer flush.Stop()
	w.OnWriteback(flush.Kick)
	root, fstats, err := image.Flatten(ctx, img, w, image.FlattenOptions{
		GoInflate: job.goInflate,
		Progress: func(p image.Progress) {
			emit(Event{Kind: EventLayer, Ref: refKey, ID: id, Progress: p})
		},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", refKey, err)
	}
	emit(Event{Kind: EventWriting, Ref: refKey, ID: id})
	var uuid [16]byte
	digest, _ := hex.DecodeString(id[len("sha256:"):])
	copy(uuid[:], digest)
	estats, err := w.Finish(root, erofs.Options{
		BuildTime:  fstree.Timespec{Sec: cf.Created.Unix(), Nsec: uint32(cf.Created.Nanosecond())},
		UUID:       uuid,
		VolumeName: "gvx",
	})
	if err != nil {
		return nil, fmt.Errorf("%s: writing the EROFS image: %w", refKey, err)
	}
	if err := flush.Stop(); err != nil {
		return nil, fmt.Errorf("%s: writing the EROFS image to disk: %w", refKey, err)
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	meta := &Image{
		Version: metaVersion,
		ID:      id,
		Config:  image.ConfigFrom(cf),
		Created: cf.Created.Time,
		Pulled:  time.Now().UTC(),
		Size:    st.Size(),
		Layers:  len(img.Layers),
		Files:   estats.Inodes,
		Xattrs:  collectXattrs(root),
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(tmp, metaName), b); err != nil {
		return nil, err
	}
	dst := s.imageDir(id)
	if err := os.Rename(tmp, dst); err != nil {
		return nil, fmt.Errorf("publishing image %s into the cache: %w", shortID(id), err)
	}
	syncDir(filepath.Dir(dst))
	meta.Dir = dst
	emit(Event{Kind: EventDone, Ref: refKey, ID: id, Image: meta, Stats: PullStats{
		Duration:     time.Since(start),
		Entries:      fstats.Entries,
		Files:        estats.Inodes,
		XattrFiles:   fstats.XattrFiles,
		GzipInflater: fstats.GzipInflater,
		DeadBlocks:   estats.DeadBlocks,
	}})
	return meta, nil
}

func collectXattrs(root *fstree.Node) []Xattr {
	var out []Xattr
	seen := make(map[*fstree.Node]bool)
	fstree.Walk(root, func(path string, n *fstree.Node) error {
		if len(n.Xattrs) == 0 || seen[n] {
			return nil
		}
		seen[n] = true
		names := make([]string, 0, len(n.Xattrs))
		for k := range n.Xattrs {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			out = append(out, Xattr{Path: "/" + path, Name: k, Value: []byte(n.Xattrs[k])})
		}
		return nil
	})
	return out
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
