package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"syscall"
	"time"

	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/fsimpl/user"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/sentry"
)

// Exec implements control.Backend.Exec.
func (b *Backend) Exec(ctx context.Context, req control.ExecRequest, stdio control.Stdio) (control.Process, error) {
	name := req.User
	if name == "" {
		name = b.defaults.User
	}
	u, err := ResolveUser(ctx, b.sb, name)
	if err != nil {
		return nil, control.Errorf(control.CodeInvalid, "%v", err)
	}
	env := MergeEnv(b.defaults.Env, req.Env)
	cwd := req.Cwd
	if cwd == "" {
		cwd = b.defaults.Cwd
	}
	spec := sentry.ProcessSpec{
		Argv:   req.Argv,
		Env:    WithHome(env, u.Home),
		Cwd:    cwd,
		UID:    u.UID,
		GID:    u.GID,
		Stdin:  stdio.Stdin,
		Stdout: stdio.Stdout,
		Stderr: stdio.Stderr,
		// A background child that keeps stdout open must not hold the
		// exec's answer forever.
		WaitDelay:      2 * time.Second,
		StderrToStdout: req.StderrToStdout,
	}
	if req.Umask != nil {
		mask := uint(*req.Umask)
		spec.Umask = &mask
	}
	p, err := b.sb.Exec(ctx, spec)
	if err != nil {
		if f, ok := StartFailureOf(req.Argv[0], err); ok {
			// As docker exec and sh: the command ran and failed, with
			// why on its stderr. An agent's typo is a result to observe,
			// not a failed call.
			out := stdio.Stderr
			if req.TTY || req.StderrToStdout || out == nil {
				out = stdio.Stdout
			}
			if out != nil {
				io.WriteString(out, "gvx: "+f.Message+"\n")
			}
			return f, nil
		}
		return nil, SandboxError(err)
	}
	return sandboxProcess{p}, nil
}

// StartFailure is a command that could not start because it is missing
// (exit code 127) or not runnable (126), as docker and sh report it.
type StartFailure struct {
	Code    int
	Message string // as docker's, e.g. exec: "x": executable file not found in $PATH
}

var _ control.Process = StartFailure{}

// StartFailureOf returns the start failure that err, from starting argv0,
// is, or false if err is about something else (the sandbox stopping, a bad
// request).
func StartFailureOf(argv0 string, err error) (StartFailure, bool) {
	var notFound user.ExecutableResolveError
	var noDir *sentry.WorkingDirError
	switch {
	case errors.As(err, &noDir):
		// Before the errnos below, which it wraps. As docker exec: a
		// working directory it cannot enter is the command's failure.
		return StartFailure{126, fmt.Sprintf("exec: working directory %q: %v", noDir.Path, noDir.Err)}, true
	case errors.As(err, &notFound):
		// Looked up in $PATH, where, as for docker, a file that is not
		// executable does not count.
		return StartFailure{127, fmt.Sprintf("exec: %q: executable file not found in $PATH", argv0)}, true
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOENT), errors.Is(err, linuxerr.ENOENT):
		return StartFailure{127, fmt.Sprintf("exec: %q: no such file or directory", argv0)}, true
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EACCES), errors.Is(err, linuxerr.EACCES):
		return StartFailure{126, fmt.Sprintf("exec: %q: permission denied", argv0)}, true
	case errors.Is(err, syscall.ENOEXEC), errors.Is(err, linuxerr.ENOEXEC):
		return StartFailure{126, fmt.Sprintf("exec: %q: exec format error", argv0)}, true
	}
	return StartFailure{}, false
}

// PID implements control.Process.PID: the command never ran.
func (StartFailure) PID() int { return 0 }

// Signal implements control.Process.Signal: there is nothing to signal.
func (StartFailure) Signal(int) error { return nil }

// SignalDescendants implements control.Process.SignalDescendants: there
// is nothing to signal.
func (StartFailure) SignalDescendants(int) error { return nil }

// Wait implements control.Process.Wait.
func (f StartFailure) Wait() (int, int, error) { return f.Code, 0, nil }

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

// SignalDescendants implements control.Process.SignalDescendants.
func (sp sandboxProcess) SignalDescendants(sig int) error {
	err := sp.p.SignalDescendants(syscall.Signal(sig))
	if errors.Is(err, sentry.ErrProcessDone) {
		return nil
	}
	return err
}

// Wait implements control.Process.Wait.
func (sp sandboxProcess) Wait() (int, int, error) {
	st, err := sp.p.Wait()
	return st.ExitCode(), int(st.Signal), err
}

// WithHome adds HOME from the user's passwd entry unless env has it.
func WithHome(env []string, home string) []string {
	for _, e := range env {
		if strings.HasPrefix(e, "HOME=") {
			return env
		}
	}
	return append(append([]string(nil), env...), "HOME="+home)
}

// MergeEnv returns base with each entry of override replacing the entry of
// the same name, or appended.
func MergeEnv(base, override []string) []string {
	out := append([]string(nil), base...)
	index := map[string]int{}
	for i, e := range out {
		k, _, _ := strings.Cut(e, "=")
		index[k] = i
	}
	for _, e := range override {
		k, _, _ := strings.Cut(e, "=")
		if i, ok := index[k]; ok {
			out[i] = e
		} else {
			index[k] = len(out)
			out = append(out, e)
		}
	}
	return out
}
