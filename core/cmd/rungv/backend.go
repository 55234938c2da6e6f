package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sync/atomic"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/user"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/sentry"
)

// sandboxBackend serves the control protocol from a running sentry
// sandbox.
type sandboxBackend struct {
	sb       *sentry.Sandbox
	info     control.SandboxInfo
	defaults processSpec // the image's env, cwd and user, for execs
	// stop asks the run command to shut the sandbox down gracefully.
	stop func(grace time.Duration)
	// snapshotHook is the image's snapshot hook, or "" (see
	// image.SnapshotHookLabel).
	snapshotHook string
	// stoppedBySnapshot is set once a checkpoint ended the sandbox.
	stoppedBySnapshot atomic.Bool
	// network is the sandbox's host side, suspended while a checkpoint
	// is taken.
	network *sandboxNetwork
}

var _ control.Backend = (*sandboxBackend)(nil)

// Info implements control.Backend.Info.
func (b *sandboxBackend) Info() control.SandboxInfo { return b.info }

// Exec implements control.Backend.Exec.
func (b *sandboxBackend) Exec(ctx context.Context, req control.ExecRequest, stdio control.Stdio) (control.Process, error) {
	user := req.User
	if user == "" {
		user = b.defaults.User
	}
	u, err := resolveUser(ctx, b.sb, user)
	if err != nil {
		return nil, control.Errorf(control.CodeInvalid, "%v", err)
	}
	env := mergeEnv(b.defaults.Env, req.Env)
	cwd := req.Cwd
	if cwd == "" {
		cwd = b.defaults.Cwd
	}
	spec := sentry.ProcessSpec{
		Argv:   req.Argv,
		Env:    withHome(env, u.Home),
		Cwd:    cwd,
		UID:    u.UID,
		GID:    u.GID,
		Stdin:  stdio.Stdin,
		Stdout: stdio.Stdout,
		Stderr: stdio.Stderr,
		// A background child that keeps stdout open must not hold the
		// exec's answer forever.
		WaitDelay: 2 * time.Second,
	}
	p, err := b.sb.Exec(ctx, spec)
	if err != nil {
		if f, ok := startFailureOf(req.Argv[0], err); ok {
			// As docker exec and sh: the command ran and failed, with
			// why on its stderr. An agent's typo is a result to observe,
			// not a failed call.
			out := stdio.Stderr
			if req.TTY || out == nil {
				out = stdio.Stdout
			}
			if out != nil {
				io.WriteString(out, "gvx: "+f.message+"\n")
			}
			return f, nil
		}
		return nil, sandboxError(err)
	}
	return sandboxProcess{p}, nil
}

// startFailure is a command that could not start because it is missing
// (exit code 127) or not runnable (126), as docker and sh report it.
type startFailure struct {
	code    int
	message string // as docker's, e.g. exec: "x": executable file not found in $PATH
}

// startFailureOf returns the start failure that err, from starting argv0,
// is, or false if err is about something else (the sandbox stopping, a bad
// request).
func startFailureOf(argv0 string, err error) (startFailure, bool) {
	var notFound user.ExecutableResolveError
	switch {
	case errors.As(err, &notFound):
		// Looked up in $PATH, where, as for docker, a file that is not
		// executable does not count.
		return startFailure{127, fmt.Sprintf("exec: %q: executable file not found in $PATH", argv0)}, true
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOENT), errors.Is(err, linuxerr.ENOENT):
		return startFailure{127, fmt.Sprintf("exec: %q: no such file or directory", argv0)}, true
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EACCES), errors.Is(err, linuxerr.EACCES):
		return startFailure{126, fmt.Sprintf("exec: %q: permission denied", argv0)}, true
	case errors.Is(err, syscall.ENOEXEC), errors.Is(err, linuxerr.ENOEXEC):
		return startFailure{126, fmt.Sprintf("exec: %q: exec format error", argv0)}, true
	}
	return startFailure{}, false
}

// PID implements control.Process.PID: the command never ran.
func (startFailure) PID() int { return 0 }

// Signal implements control.Process.Signal: there is nothing to signal.
func (startFailure) Signal(int) error { return nil }

// Wait implements control.Process.Wait.
func (f startFailure) Wait() (int, int, error) { return f.code, 0, nil }

// sandboxError maps the Sentry's errors about the sandbox's state to
// protocol errors.
func sandboxError(err error) error {
	switch {
	case errors.Is(err, sentry.ErrStopped), errors.Is(err, sentry.ErrClosed):
		return control.Errorf(control.CodeUnavailable, "the sandbox is stopping: %v", err)
	case errors.Is(err, sentry.ErrNotStarted):
		return control.Errorf(control.CodeInvalid, "%v", err)
	}
	return err
}

// withHome adds HOME from the user's passwd entry unless env has it.
func withHome(env []string, home string) []string {
	for _, e := range env {
		if len(e) >= 5 && e[:5] == "HOME=" {
			return env
		}
	}
	return append(append([]string(nil), env...), "HOME="+home)
}

// sandboxProcess is an exec's command as the control protocol sees it.
type sandboxProcess struct{ p *sentry.Process }

var _ control.Process = sandboxProcess{}

// PID implements control.Process.PID.
func (sp sandboxProcess) PID() int { return sp.p.PID() }

// Signal implements control.Process.Signal: the signal reaches the
// command's whole session and its descendants, so that a timed-out or
// cancelled `sh -c …` does not leave its children running.
func (sp sandboxProcess) Signal(sig int) error {
	err := sp.p.SignalGroup(syscall.Signal(sig))
	if errors.Is(err, sentry.ErrProcessDone) {
		return nil
	}
	return err
}

func (sp sandboxProcess) Wait() (int, int, error) {
	st, err := sp.p.Wait()
	return st.ExitCode(), int(st.Signal), err
}

// SignalInit implements control.Backend.SignalInit.
func (b *sandboxBackend) SignalInit(sig int) error {
	init := b.sb.Init()
	if init == nil {
		return control.Errorf(control.CodeUnavailable, "the sandbox has no init process")
	}
	err := init.Signal(syscall.Signal(sig))
	if errors.Is(err, sentry.ErrProcessDone) {
		return nil
	}
	return err
}

// ReadFile implements control.Backend.ReadFile.
func (b *sandboxBackend) ReadFile(ctx context.Context, path string, w io.Writer) (control.FileInfo, error) {
	f, err := b.sb.Open(ctx, path)
	if err != nil {
		return control.FileInfo{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return control.FileInfo{}, err
	}
	if _, err := io.Copy(w, f); err != nil {
		return control.FileInfo{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return fileInfo(path, fi), nil
}

// WriteFile implements control.Backend.WriteFile.
func (b *sandboxBackend) WriteFile(ctx context.Context, req control.WriteFileRequest, r io.Reader) (control.FileInfo, error) {
	mode := fs.FileMode(req.Mode & 0o7777)
	if mode == 0 {
		mode = 0o644
	}
	owner, err := b.owner(ctx, req.Owner)
	if err != nil {
		return control.FileInfo{}, err
	}
	if req.MakeParents {
		if err := b.sb.MkdirAll(ctx, path.Dir(req.Path), owner); err != nil {
			return control.FileInfo{}, err
		}
	}
	if _, err := b.sb.WriteFileFrom(ctx, req.Path, r, mode, owner); err != nil {
		return control.FileInfo{}, err
	}
	return b.Stat(ctx, req.Path)
}

// owner resolves a request's owner as Exec resolves its user. "" is nil:
// root, or an archive's owners.
func (b *sandboxBackend) owner(ctx context.Context, spec string) (*sentry.Owner, error) {
	if spec == "" {
		return nil, nil
	}
	u, err := resolveUser(ctx, b.sb, spec)
	if err != nil {
		return nil, control.Errorf(control.CodeInvalid, "owner: %v", err)
	}
	return &sentry.Owner{UID: u.UID, GID: u.GID}, nil
}

// CopyIn implements control.Backend.CopyIn.
func (b *sandboxBackend) CopyIn(ctx context.Context, req control.CopyInRequest, r io.Reader) (control.CopyResult, error) {
	owner, err := b.owner(ctx, req.Owner)
	if err != nil {
		return control.CopyResult{}, err
	}
	dir := req.Path
	st, err := b.sb.CopyIn(ctx, dir, r, owner)
	if errors.Is(err, sentry.ErrBadArchive) {
		return control.CopyResult{}, control.Errorf(control.CodeInvalid, "copying into %s (after %d entries): %v", dir, st.Entries, err)
	}
	if err != nil {
		return control.CopyResult{}, fmt.Errorf("copying into %s (after %d entries): %w", dir, st.Entries, err)
	}
	return control.CopyResult{Entries: st.Entries, Bytes: st.Bytes}, nil
}

// CopyOut implements control.Backend.CopyOut.
func (b *sandboxBackend) CopyOut(ctx context.Context, path string, w io.Writer) (control.CopyResult, error) {
	st, err := b.sb.CopyOut(ctx, path, w)
	if err != nil {
		return control.CopyResult{}, fmt.Errorf("copying %s out: %w", path, err)
	}
	return control.CopyResult{Entries: st.Entries, Bytes: st.Bytes}, nil
}

// Stat implements control.Backend.Stat.
func (b *sandboxBackend) Stat(ctx context.Context, path string) (control.FileInfo, error) {
	fi, err := b.sb.Stat(ctx, path)
	if err != nil {
		return control.FileInfo{}, err
	}
	return fileInfo(path, fi), nil
}

func fileInfo(path string, fi fs.FileInfo) control.FileInfo {
	info := control.FileInfo{Path: path, Size: fi.Size(), Mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*sentry.FileStat); ok {
		info.Mode, info.UID, info.GID = st.Mode, st.UID, st.GID
	}
	return info
}

// Wait implements control.Backend.Wait.
func (b *sandboxBackend) Wait(ctx context.Context) (control.WaitResult, error) {
	init := b.sb.Init()
	if init == nil {
		return control.WaitResult{}, control.Errorf(control.CodeUnavailable, "the sandbox has no init process")
	}
	select {
	case <-init.Done():
	case <-ctx.Done():
		return control.WaitResult{}, ctx.Err()
	}
	st, err := init.Wait()
	return control.WaitResult{ExitCode: st.ExitCode(), Signal: int(st.Signal)}, err
}

// Stats implements control.Backend.Stats.
func (b *sandboxBackend) Stats(ctx context.Context) (control.Stats, error) {
	st, err := b.sb.Stats()
	if err != nil {
		return control.Stats{}, err
	}
	return control.Stats{MemoryUsage: st.MemoryUsage, MemoryLimit: st.MemoryLimit, OOMKills: st.OOMKills, Tasks: st.Tasks, PidsLimit: st.PidsLimit}, nil
}

// Shutdown implements control.Backend.Shutdown.
func (b *sandboxBackend) Shutdown(ctx context.Context, grace time.Duration) error {
	b.stop(grace)
	return nil
}
