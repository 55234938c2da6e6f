package sentry

import (
	"fmt"
	"strings"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/cleanup"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/fspath"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/overlay"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/tmpfs"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/vfs"

	"z.gfire.dev/gvx/core/sentry/ext4fs"
)

// overlayType is the "overlay" filesystem type of the sandbox: gVisor's
// overlay, with what Docker's overlay2 driver needs from a guest mount(2)
// that gVisor's own option parsing refuses:
//
//   - the upper layer may be on an ext4 volume (gVisor accepts only tmpfs
//     and 9p upper layers from user mounts; any other type is still
//     refused);
//   - lowerdir, upperdir and workdir may be relative to the working
//     directory (Docker uses "l/…" paths when the options would exceed a
//     page);
//   - options Linux accepts but gVisor does not are dropped when they ask
//     for nothing gVisor lacks (index=off, redirect_dir=off, metacopy=off,
//     xino, uuid, volatile), and refused when they do (index=on, ...).
//
// The layers are resolved once, here, cloned into private mounts, and
// handed to gVisor's overlay in overlay.FilesystemOptions; nothing is
// resolved twice, so a rename cannot swap a layer between check and use.
// Internal mounts (the loader's root filesystem) go to gVisor's overlay
// unchanged.
//
// +stateify savable
type overlayType struct {
	overlay.FilesystemType
}

var _ vfs.FilesystemType = (*overlayType)(nil)

// upperTypes are the filesystem types an upper layer may have.
var upperTypes = map[string]bool{tmpfs.Name: true, "9p": true, ext4fs.Name: true}

// GetFilesystem implements vfs.FilesystemType.GetFilesystem.
func (t overlayType) GetFilesystem(ctx context.Context, vfsObj *vfs.VirtualFilesystem, creds *auth.Credentials, source string, opts vfs.GetFilesystemOptions) (*vfs.Filesystem, *vfs.Dentry, error) {
	if opts.InternalMount || opts.InternalData != nil {
		return t.FilesystemType.GetFilesystem(ctx, vfsObj, creds, source, opts)
	}
	mopts, err := parseOverlayOptions(opts.Data)
	if err != nil {
		ctx.Infof("overlay: %v", err)
		return nil, nil, linuxerr.EINVAL
	}
	root := vfs.RootFromContext(ctx)
	if !root.Ok() {
		return nil, nil, linuxerr.EINVAL
	}
	defer root.DecRef(ctx)
	start := root
	if task := kernel.TaskFromContext(ctx); task != nil {
		if cwd := task.FSContext().WorkingDirectory(); cwd.Ok() {
			defer cwd.DecRef(ctx)
			start = cwd
		}
	}
	r := layerResolver{ctx: ctx, vfsObj: vfsObj, creds: creds, root: root, start: start}
	defer r.release()

	var fsopts overlay.FilesystemOptions
	data := mopts.passOn
	if mopts.upper != "" {
		upper, err := r.upper(mopts.upper, mopts.work)
		if err != nil {
			return nil, nil, err
		}
		fsopts.UpperRoot = upper
		if upper.Mount().Filesystem().FilesystemType().Name() == "9p" && !strings.Contains(","+data+",", ",userxattr,") {
			// As gVisor's overlay does for gofer upper layers, which
			// cannot store trusted.* attributes on the host.
			data = joinOptions(data, "userxattr")
		}
	}
	for _, l := range mopts.lowers {
		lower, err := r.layer(l, true /* readOnly */)
		if err != nil {
			return nil, nil, err
		}
		fsopts.LowerRoots = append(fsopts.LowerRoots, lower)
	}
	// gVisor's overlay takes its own references on the layers.
	return t.FilesystemType.GetFilesystem(ctx, vfsObj, creds, source, vfs.GetFilesystemOptions{
		Data:         data,
		InternalData: fsopts,
	})
}

// overlayOptions are the parsed options of a guest overlay mount.
type overlayOptions struct {
	lowers []string
	upper  string
	work   string
	// passOn are options for gVisor's overlay (userxattr).
	passOn string
}

// parseOverlayOptions parses overlayfs mount options as Linux accepts
// them, keeping what gVisor's overlay implements.
func parseOverlayOptions(data string) (overlayOptions, error) {
	var o overlayOptions
	for _, opt := range strings.Split(data, ",") {
		if opt == "" {
			continue
		}
		key, val, hasVal := strings.Cut(opt, "=")
		switch key {
		case "lowerdir":
			for _, l := range strings.Split(val, ":") {
				if l != "" {
					o.lowers = append(o.lowers, l)
				}
			}
		case "upperdir":
			o.upper = val
		case "workdir":
			o.work = val
		case "userxattr":
			if hasVal {
				return o, errorf("userxattr takes no value")
			}
			o.passOn = joinOptions(o.passOn, "userxattr")
		case "index", "metacopy", "nfs_export":
			// Features gVisor's overlay does not have: "off" is what it
			// does anyway.
			if val != "off" {
				return o, errorf("%s=%s is not supported (only %s=off)", key, val, key)
			}
		case "redirect_dir":
			if val != "off" && val != "nofollow" {
				return o, errorf("redirect_dir=%s is not supported (only off or nofollow)", val)
			}
		case "xino", "uuid":
			// Inode number and file handle schemes: gVisor's overlay
			// has its own.
		case "volatile":
			// Skipping syncs is a permission, not a duty.
		default:
			return o, errorf("unknown option %q", opt)
		}
	}
	if len(o.lowers) == 0 {
		return o, errorf("lowerdir is required")
	}
	if o.upper != "" && o.work == "" {
		return o, errorf("upperdir needs a workdir")
	}
	return o, nil
}

func joinOptions(a, b string) string {
	if a == "" {
		return b
	}
	return a + "," + b
}

// layerResolver resolves overlay layers from a guest's point of view and
// keeps the private mounts it made until release.
type layerResolver struct {
	ctx    context.Context
	vfsObj *vfs.VirtualFilesystem
	creds  *auth.Credentials
	root   vfs.VirtualDentry
	start  vfs.VirtualDentry
	made   []vfs.VirtualDentry
}

// resolve returns the searchable directory at p, relative to the working
// directory unless absolute, with a reference.
func (r *layerResolver) resolve(p string) (vfs.VirtualDentry, error) {
	path := fspath.Parse(p)
	start := r.start
	if path.Absolute {
		start = r.root
	}
	pop := &vfs.PathOperation{Root: r.root, Start: start, Path: path, FollowFinalSymlink: true}
	vd, err := r.vfsObj.GetDentryAt(r.ctx, r.creds, pop, &vfs.GetDentryOptions{CheckSearchable: true})
	if err != nil {
		r.ctx.Infof("overlay: resolving layer %q: %v", p, err)
	}
	return vd, err
}

// layer resolves p and returns a private, non-recursive mount rooted
// there: a layer must be a single mount, so the overlay can never walk
// into other mounts (or itself).
func (r *layerResolver) layer(p string, readOnly bool) (vfs.VirtualDentry, error) {
	vd, err := r.resolve(p)
	if err != nil {
		return vfs.VirtualDentry{}, err
	}
	defer vd.DecRef(r.ctx)
	return r.private(vd, readOnly), nil
}

// private clones vd's mount, rooted at vd, detached from every namespace.
func (r *layerResolver) private(vd vfs.VirtualDentry, readOnly bool) vfs.VirtualDentry {
	mopts := vd.Mount().Options()
	if readOnly {
		mopts.ReadOnly = true
	}
	mnt := r.vfsObj.NewDisconnectedMount(vd.Mount().Filesystem(), vd.Dentry(), &mopts)
	vd.Dentry().IncRef()
	private := vfs.MakeVirtualDentry(mnt, vd.Dentry())
	r.made = append(r.made, private)
	return private
}

// upper resolves the upper layer and its workdir, checks them, and makes
// workdir/work as Linux does (Docker chowns it).
func (r *layerResolver) upper(upperPath, workPath string) (vfs.VirtualDentry, error) {
	upper, err := r.resolve(upperPath)
	if err != nil {
		return vfs.VirtualDentry{}, err
	}
	cu := cleanup.Make(func() { upper.DecRef(r.ctx) })
	defer cu.Clean()
	fsType := upper.Mount().Filesystem().FilesystemType().Name()
	if !upperTypes[fsType] {
		r.ctx.Infof("overlay: upperdir %q is on a %s filesystem; upper layers must be on tmpfs, 9p or an ext4 volume", upperPath, fsType)
		return vfs.VirtualDentry{}, linuxerr.EINVAL
	}
	work, err := r.resolve(workPath)
	if err != nil {
		return vfs.VirtualDentry{}, err
	}
	defer work.DecRef(r.ctx)
	if work.Mount().Filesystem() != upper.Mount().Filesystem() {
		r.ctx.Infof("overlay: workdir %q and upperdir %q are on different filesystems", workPath, upperPath)
		return vfs.VirtualDentry{}, linuxerr.EINVAL
	}
	pop := &vfs.PathOperation{Root: work, Start: work, Path: fspath.Parse("work")}
	if err := r.vfsObj.MkdirAt(r.ctx, r.creds, pop, &vfs.MkdirOptions{Mode: linux.ModeUserAll}); err != nil && !linuxerr.Equals(linuxerr.EEXIST, err) {
		r.ctx.Infof("overlay: creating %s/work: %v", workPath, err)
	}
	return r.private(upper, false /* readOnly */), nil
}

// release drops the private mounts.
func (r *layerResolver) release() {
	for _, vd := range r.made {
		vd.DecRef(r.ctx)
	}
}

func errorf(format string, args ...any) error {
	return fmt.Errorf("mount options: "+format, args...)
}
