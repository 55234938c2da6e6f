package sentry

import (
	"fmt"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/cleanup"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/fspath"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/user"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/sentry/limits"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// containerID tags every guest task; the kernel uses it to group a
// container's tasks (signals to all, cgroups).
const containerID = "gvx"

// maxOpenFiles is RLIMIT_NOFILE for guest processes, as Docker sets it.
const maxOpenFiles = 1 << 20

// createProcess creates, but does not start, a process for spec. For init
// (isInit), a missing working directory is created (owned by root), and its
// imported streams are the ones a snapshot re-binds on restore. exe, if not
// nil, is executed instead of looking up spec.Argv[0].
//
// Preconditions: the kernel is not released: the caller holds s.mu with
// s.state stateCreated (Start), or an Exec registered by beginExec.
func (s *Sandbox) createProcess(spec *ProcessSpec, isInit bool, exe *vfs.FileDescription) (*Process, error) {
	ctx := s.k.SupervisorContext()
	ls, err := newLimitSet()
	if err != nil {
		return nil, err
	}
	st, err := newStdio(ctx, s.k, spec, isInit)
	if err != nil {
		return nil, err
	}
	cu := cleanup.Make(func() { st.release(ctx) })
	defer cu.Clean()

	args := kernel.CreateProcessArgs{
		Argv:                 spec.Argv,
		Envv:                 spec.environ(),
		WorkingDirectory:     spec.cwd(),
		Credentials:          s.credentials(spec),
		FDTable:              st.fdTable,
		Umask:                spec.umask(),
		Limits:               ls,
		MaxSymlinkTraversals: linux.MaxSymlinkTraversals,
		UTSNamespace:         s.k.RootUTSNamespace(),
		IPCNamespace:         s.k.RootIPCNamespace(),
		PIDNamespace:         s.k.RootPIDNamespace(),
		MountNamespace:       s.mns,
		ContainerID:          containerID,
	}
	if st.tty != nil {
		args.TTY = st.tty.TTY()
	}
	pctx := args.NewContext(s.k)
	if isInit {
		if err := s.makeDir(args.WorkingDirectory); err != nil {
			return nil, err
		}
	} else if err := s.checkDir(args.WorkingDirectory); err != nil {
		return nil, err
	}
	args.Envv, err = user.MaybeAddExecUserHome(pctx, s.mns, args.Credentials.RealKUID, args.Envv)
	if err != nil {
		return nil, fmt.Errorf("sentry: looking up the home directory of uid %d: %w", spec.UID, err)
	}
	if exe != nil {
		args.File = exe
	} else if args.Filename, err = user.ResolveExecutablePath(pctx, &args); err != nil {
		return nil, fmt.Errorf("sentry: %w", err)
	}

	// CreateProcess consumes a reference on the mount namespace, success
	// or not, and takes its own on the FD table.
	s.mns.IncRef()
	tg, pid, err := s.k.CreateProcess(args)
	if err != nil {
		// Only on failure, so that an exec opens its file once: the
		// loader's error is text, and callers need its errno.
		if exe == nil {
			if cerr := s.checkExecutable(pctx, &args); cerr != nil {
				err = cerr
			}
		}
		return nil, fmt.Errorf("sentry: starting %q: %w", spec.Argv[0], err)
	}
	cu.Release()
	st.fdTable.DecRef(ctx)
	return newProcess(s, tg, pid, st, spec), nil
}

// checkExecutable returns the error execve(2) would give (ENOENT, EACCES)
// if args.Filename cannot be executed with args.Credentials. gVisor's
// loader reports these only as text, and callers tell a missing command
// (exit code 127) from one that cannot run (126) by them. It opens the file
// as the loader does.
//
// Preconditions: args.Filename is absolute.
func (s *Sandbox) checkExecutable(ctx context.Context, args *kernel.CreateProcessArgs) error {
	root := s.mns.Root(ctx)
	defer root.DecRef(ctx)
	pop := &vfs.PathOperation{Root: root, Start: root, Path: fspath.Parse(args.Filename), FollowFinalSymlink: true}
	fd, err := s.k.VFS().OpenAt(ctx, args.Credentials, pop, &vfs.OpenOptions{Flags: linux.O_RDONLY, FileExec: true})
	if err != nil {
		return err
	}
	defer fd.DecRef(ctx)
	st, err := fd.Stat(ctx, vfs.StatOptions{Mask: linux.STATX_TYPE})
	if err != nil {
		return err
	}
	if linux.FileMode(st.Mode).FileType() != linux.ModeRegular {
		return linuxerr.EACCES // as execve(2) for a directory or device
	}
	return nil
}

// makeDir creates dir and its parents in the guest's root filesystem.
func (s *Sandbox) makeDir(dir string) error {
	ctx := s.k.SupervisorContext()
	root := s.mns.Root(ctx)
	defer root.DecRef(ctx)
	creds := auth.NewRootCredentials(s.k.RootUserNamespace())
	if err := s.k.VFS().MkdirAllAt(ctx, dir, root, creds, &vfs.MkdirOptions{Mode: 0o755}, true /* mustBeDir */); err != nil {
		return &WorkingDirError{Path: dir, Err: err}
	}
	return nil
}

// checkDir returns a *WorkingDirError if an Exec cannot enter dir: it is
// missing or not a directory. It runs before creation, not only once it
// failed: gVisor's process creation fails on a missing directory with an
// error that says so only in text, and accepts a file as the working
// directory (TestExecInAMissingWorkingDirectory covers both).
func (s *Sandbox) checkDir(dir string) error {
	ctx := s.k.SupervisorContext()
	root := s.mns.Root(ctx)
	defer root.DecRef(ctx)
	creds := auth.NewRootCredentials(s.k.RootUserNamespace())
	pop := &vfs.PathOperation{Root: root, Start: root, Path: fspath.Parse(dir), FollowFinalSymlink: true}
	vd, err := s.k.VFS().GetDentryAt(ctx, creds, pop, &vfs.GetDentryOptions{CheckSearchable: true})
	if err != nil {
		return &WorkingDirError{Path: dir, Err: err, Exec: true}
	}
	vd.DecRef(ctx)
	return nil
}

// A WorkingDirError is a ProcessSpec.Cwd that Start could not create as a
// directory, or that an Exec cannot enter: the guest's filesystem, not the
// spec, is in question.
type WorkingDirError struct {
	Path string
	Err  error
	// Exec is set for an Exec's, which is not created, as docker exec
	// does not create one.
	Exec bool
}

// Error implements error.
func (e *WorkingDirError) Error() string {
	if e.Exec {
		return fmt.Sprintf("sentry: working directory %s: %v; an exec does not create it: give a directory that exists in the guest", e.Path, e.Err)
	}
	return fmt.Sprintf("sentry: creating working directory %s: %v; give a directory that exists in the guest or can be created there", e.Path, e.Err)
}

// Unwrap returns e.Err.
func (e *WorkingDirError) Unwrap() error { return e.Err }

// newLimitSet returns the resource limits of a new guest process: those of
// a booted Linux distribution, with Docker's open-file limit.
func newLimitSet() (*limits.LimitSet, error) {
	ls, err := limits.NewLinuxDistroLimitSet()
	if err != nil {
		return nil, fmt.Errorf("sentry: creating resource limits: %w", err)
	}
	ls.SetUnchecked(limits.NumberOfFiles, limits.Limit{Cur: maxOpenFiles, Max: maxOpenFiles})
	return ls, nil
}
