package sentry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/cleanup"
	gcontext "gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/internal/hostfile"
	"z.gfire.dev/gvx/core/sentry/ext4fs"
)

// Volume mounts an ext4 volume into the guest: a single host file holding
// an ext4 filesystem (or a copy-on-write delta over a golden image, see
// core/ext4lite), which the Sentry reads and writes itself.
type Volume struct {
	// Path is the image or delta on the host. It must exist; create one
	// with ext4lite.Create or `rungv volume create`.
	Path string
	// File, instead of Path, is an image already open (read-write unless
	// ReadOnly), as Config.Image is: New duplicates the descriptor, so the
	// caller may close File after New returns. Deltas need Path (they
	// are two files).
	File *os.File
	// Target is where the guest sees the volume: an absolute path,
	// created if missing.
	Target string
	// ReadOnly opens the image without ever writing it and mounts it
	// read-only.
	ReadOnly bool
}

// A VolumeError is a volume that New or Restore could not open or mount:
// the image named, not the Config, is in question.
type VolumeError struct {
	Volume string // the image's path, or its File's name
	Target string
	Op     string // what failed: "opening", "mounting", ...
	Err    error  // why, with what to do
}

// Error implements error.
func (e *VolumeError) Error() string {
	return fmt.Sprintf("sentry: %s volume %s for %s: %v", e.Op, e.Volume, e.Target, e.Err)
}

// Unwrap returns e.Err.
func (e *VolumeError) Unwrap() error { return e.Err }

// validateVolumes checks the volumes' paths and targets.
func validateVolumes(vols []Volume) error {
	seen := make(map[string]bool)
	for _, v := range vols {
		if (v.Path == "") == (v.File == nil) {
			return fmt.Errorf("sentry: volume for %q needs a Path or a File (exactly one); name an ext4 image file", v.Target)
		}
		if !path.IsAbs(v.Target) || path.Clean(v.Target) != v.Target || v.Target == "/" {
			return fmt.Errorf("sentry: volume target %q must be a clean absolute path other than /", v.Target)
		}
		if seen[v.Target] {
			return fmt.Errorf("sentry: two volumes are mounted at %q", v.Target)
		}
		seen[v.Target] = true
	}
	return nil
}

// openVolumes opens every volume image, replaying journals. It runs before
// lockdown, which forbids opening host files.
func openVolumes(vols []Volume, errs io.Writer) ([]*ext4fs.Volume, error) {
	var opened []*ext4fs.Volume
	cu := cleanup.Make(func() { closeVolumes(gcontext.Background(), opened) })
	defer cu.Clean()
	for _, v := range vols {
		fs, err := openVolume(v, corruptionReporter(errs, v.name()))
		switch {
		case errors.Is(err, blockdev.ErrInUse), errors.Is(err, hostfile.ErrKind), errors.Is(err, ext4lite.ErrUnsupported):
			// The error says what to do; the image is not in question.
			return nil, &VolumeError{Volume: v.name(), Target: v.Target, Op: "opening", Err: err}
		case err != nil:
			err = fmt.Errorf("%w (is it an ext4 image? check it with `rungv volume check %s`)", err, v.name())
			return nil, &VolumeError{Volume: v.name(), Target: v.Target, Op: "opening", Err: err}
		}
		opened = append(opened, ext4fs.NewVolume(fs, v.ReadOnly, v.Target))
	}
	cu.Release()
	return opened, nil
}

// maxVolumeErrors bounds the corruption reports of one volume: a guest
// that walks a damaged tree would meet the same damage again and again.
const maxVolumeErrors = 10

// corruptionReporter returns an ext4lite.Options.OnCorruption that writes
// the first maxVolumeErrors reports of the volume name to w, or nil if w
// is nil.
func corruptionReporter(w io.Writer, name string) func(error) {
	if w == nil {
		return nil
	}
	var n atomic.Int64
	return func(err error) {
		// An internal error carries its stack after the first line.
		msg, _, _ := strings.Cut(err.Error(), "\n")
		switch k := n.Add(1); {
		case k == 1:
			fmt.Fprintf(w, "volume %s is corrupt; the guest got an I/O error: %s (check it with `rungv volume check %s`; `e2fsck -fy` repairs it)\n", name, msg, name)
		case k <= maxVolumeErrors:
			fmt.Fprintf(w, "volume %s is corrupt; the guest got an I/O error: %s\n", name, msg)
		case k == maxVolumeErrors+1:
			fmt.Fprintf(w, "volume %s: more corruption; further reports are not shown\n", name)
		}
	}
}

// openVolume opens v's image (or delta) with ext4lite; onCorruption is
// its ext4lite.Options.OnCorruption.
func openVolume(v Volume, onCorruption func(error)) (*ext4lite.FS, error) {
	opts := ext4lite.Options{ReadOnly: v.ReadOnly, OnCorruption: onCorruption}
	if v.File == nil {
		return ext4lite.OpenVolume(v.Path, opts)
	}
	fd, err := dupFile(v.File)
	if err != nil {
		return nil, fmt.Errorf("duplicating the descriptor: %w", err)
	}
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err == nil && flags&unix.O_ACCMODE == unix.O_RDONLY && !v.ReadOnly {
		unix.Close(fd)
		return nil, errors.New("the file is open read-only: open it read-write, or set ReadOnly")
	}
	dev, err := blockdev.NewFile(os.NewFile(uintptr(fd), v.File.Name()), v.ReadOnly)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	fs, err := ext4lite.Open(dev, opts)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return fs, nil
}

// name names v's image in messages.
func (v Volume) name() string {
	if v.Path != "" {
		return v.Path
	}
	return v.File.Name()
}

// closeVolumes writes back and closes volumes, returning every failure.
//
// Preconditions: no guest task runs.
func closeVolumes(ctx gcontext.Context, vols []*ext4fs.Volume) error {
	var errs []error
	for _, v := range vols {
		if err := v.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mountVolumes mounts opened[i] at vols[i].Target, parents before
// children.
func mountVolumes(ctx gcontext.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, mns *vfs.MountNamespace, vols []Volume, opened []*ext4fs.Volume) error {
	order := make([]int, len(vols))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		return strings.Count(vols[order[a]].Target, "/") < strings.Count(vols[order[b]].Target, "/")
	})
	root := mns.Root(ctx)
	defer root.DecRef(ctx)
	for _, i := range order {
		v := vols[i]
		if err := vfsObj.MkdirAllAt(ctx, v.Target, root, creds, &vfs.MkdirOptions{Mode: 0o755, ForSyntheticMountpoint: true}, true /* mustBeDir */); err != nil {
			return &VolumeError{Volume: v.name(), Target: v.Target, Op: "creating the mount point of", Err: err}
		}
		pop := pathAt(root, v.Target, true)
		opts := &vfs.MountOptions{
			ReadOnly: v.ReadOnly,
			GetFilesystemOptions: vfs.GetFilesystemOptions{
				InternalMount: true,
				InternalData:  ext4fs.InternalData{Volume: opened[i]},
			},
		}
		if _, err := vfsObj.MountAt(ctx, creds, filepath.Base(v.name()), pop, ext4fs.Name, opts); err != nil {
			err = fmt.Errorf("%w (check it with `rungv volume check %s`)", err, v.name())
			return &VolumeError{Volume: v.name(), Target: v.Target, Op: "mounting", Err: err}
		}
	}
	return nil
}

// SyncVolumes writes every volume's cached data and metadata to its image,
// as sync(1) in the guest would, and returns the first failure.
func (s *Sandbox) SyncVolumes(ctx context.Context) error {
	s.mu.Lock()
	if s.state == stateClosed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.users.Add(1)
	s.mu.Unlock()
	defer s.users.Done()
	kctx := s.k.SupervisorContext()
	for _, v := range s.volumes {
		if err := v.Sync(kctx); err != nil {
			return err
		}
	}
	return nil
}
