package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"z.gfire.dev/gvx/core/internal/flock"
)

// Removal reports what Remove did, in docker's words.
type Removal struct {
	Untagged []string // references removed
	Deleted  []string // image IDs deleted
}

// Remove removes a reference, or an image by ID. Removing the last
// reference of an image deletes the image; removing by ID deletes the image
// and every reference to it. Sandboxes already running from the image keep
// working: they hold the EROFS file open.
func (s *Store) Remove(ctx context.Context, refOrID string) (Removal, error) {
	id, err := s.resolve(refOrID)
	if err != nil {
		return Removal{}, err
	}
	// Under the image's lock, a concurrent pull cannot re-reference the
	// image between our decision and the deletion.
	lock, err := flock.Acquire(ctx, s.imageLock(id))
	if err != nil {
		return Removal{}, err
	}
	defer lock.Release()
	var r Removal
	stillReferenced := false
	err = s.updateRefs(ctx, func(refs map[string]string) error {
		key := refOrID
		if _, ok := refs[key]; !ok {
			if norm, err := normalizeRef(refOrID); err == nil {
				key = norm
			}
		}
		if _, ok := refs[key]; ok {
			// Named by a reference: untag it, delete the image only if
			// nothing else names it.
			delete(refs, key)
			r.Untagged = append(r.Untagged, key)
			for _, other := range refs {
				stillReferenced = stillReferenced || other == id
			}
			return nil
		}
		for ref, rid := range refs {
			if rid == id {
				delete(refs, ref)
				r.Untagged = append(r.Untagged, ref)
			}
		}
		return nil
	})
	if err != nil || stillReferenced {
		return r, err
	}
	if err := s.deleteImageLocked(id); err != nil {
		return r, err
	}
	r.Deleted = append(r.Deleted, id)
	return r, nil
}

// deleteImageLocked removes an image directory: first renamed into tmp/ so
// no reader ever sees half of it, then deleted.
//
// Preconditions: the image's lock is held.
func (s *Store) deleteImageLocked(id string) error {
	dir := s.imageDir(id)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	trash, err := os.MkdirTemp(filepath.Join(s.root, tmpDir), "rm-")
	if err != nil {
		return err
	}
	if err := os.Rename(dir, filepath.Join(trash, "image")); err != nil {
		os.Remove(trash)
		return fmt.Errorf("removing image %s: %w", shortID(id), err)
	}
	return os.RemoveAll(trash)
}

// PruneReport says what Prune removed.
type PruneReport struct {
	Deleted   []string // image IDs
	Reclaimed int64    // bytes of EROFS images deleted
	Leftovers int      // abandoned temporary entries removed
}

// Prune deletes images that no reference names (all: every image) and the
// leftovers of pulls that died. Pulls in progress are left alone.
func (s *Store) Prune(ctx context.Context, all bool) (PruneReport, error) {
	var rep PruneReport
	images, err := s.List()
	if err != nil {
		return rep, err
	}
	for _, img := range images {
		if len(img.Refs) > 0 && !all {
			continue
		}
		deleted, err := s.pruneImage(ctx, img.ID, all)
		if err != nil {
			return rep, err
		}
		if deleted {
			rep.Deleted = append(rep.Deleted, img.ID)
			rep.Reclaimed += img.Size
		}
	}
	// tmp/ entries are "<short-id>-<random>" (pulls) or "rm-<random>"
	// (removals). A pull in progress holds its image lock; a removal is
	// over in moments, so only old ones are abandoned.
	entries, err := os.ReadDir(filepath.Join(s.root, tmpDir))
	if err != nil {
		return rep, err
	}
	for _, e := range entries {
		path := filepath.Join(s.root, tmpDir, e.Name())
		if strings.HasPrefix(e.Name(), "rm-") {
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > abandonedAfter {
				os.RemoveAll(path)
				rep.Leftovers++
			}
			continue
		}
		short, _, ok := strings.Cut(e.Name(), "-")
		if !ok || !s.pullInProgress(short) {
			os.RemoveAll(path)
			rep.Leftovers++
		}
	}
	return rep, nil
}

// pruneImage deletes an image that no reference names (with all: every
// image, references and all), deciding under the image's lock so that a
// pull that referenced it meanwhile wins.
func (s *Store) pruneImage(ctx context.Context, id string, all bool) (bool, error) {
	lock, err := flock.Acquire(ctx, s.imageLock(id))
	if err != nil {
		return false, err
	}
	defer lock.Release()
	referenced := false
	err = s.updateRefs(ctx, func(refs map[string]string) error {
		for ref, rid := range refs {
			if rid != id {
				continue
			}
			referenced = true
			if all {
				delete(refs, ref)
			}
		}
		return nil
	})
	if err != nil || (referenced && !all) {
		return false, err
	}
	return true, s.deleteImageLocked(id)
}

// pullInProgress reports whether some process holds the lock of an image
// whose ID starts with short.
func (s *Store) pullInProgress(short string) bool {
	locks, err := filepath.Glob(filepath.Join(s.root, locksDir, short+"*.lock"))
	if err != nil {
		return true
	}
	for _, path := range locks {
		l, held, err := flock.TryAcquire(path)
		if err != nil || held {
			return true
		}
		l.Release()
	}
	return false
}

// abandonedAfter is how old a removal's leftovers must be before Prune
// deletes them.
const abandonedAfter = 10 * time.Minute
