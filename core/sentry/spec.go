package sentry

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"syscall"
	"time"
)

// ProcessSpec describes a guest process.
type ProcessSpec struct {
	// Argv is the command line; Argv[0] is looked up in the guest's PATH
	// unless it contains a slash. Required.
	Argv []string

	// Env is the environment, "KEY=value" entries. PATH defaults to the
	// usual Linux search path and HOME to the user's home in /etc/passwd.
	Env []string

	// Cwd is the absolute working directory; empty means "/". Start
	// creates it if it is missing, as `docker run -w` does; Exec requires
	// it to exist, as `docker exec -w` does.
	Cwd string

	// UID and GID are the guest user and group; ExtraGIDs are the
	// supplementary groups. Root (0) gets every capability except
	// CAP_NET_RAW without Config.NetRaw; other users get none.
	UID, GID  uint32
	ExtraGIDs []uint32

	// Stdin, Stdout and Stderr are the standard streams. An *os.File that
	// is a pipe, socket or terminal is handed to the guest as a host
	// descriptor (the guest reads and writes it directly); any other Reader
	// or Writer, regular files included, is connected through a pipe inside
	// the sandbox and copied, so a file's offset advances as with a host
	// process. Nil means an empty stdin and discarded output.
	//
	// Importing an *os.File sets O_NONBLOCK on its open file description,
	// which the caller shares.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	// Umask, when not nil, is the process's file mode creation mask, at
	// most 0o777; nil means 022.
	Umask *uint

	// StderrToStdout makes the guest's descriptor 2 a duplicate of its
	// descriptor 1, as `2>&1` does: one pipe or file, so stderr reaches
	// Stdout in the order written, and Stderr is unused. A TTY process's
	// streams are one terminal already, so it ignores this.
	StderrToStdout bool

	// TTY makes the standard streams the guest's controlling terminal.
	// They must then all be the same host terminal (*os.File).
	TTY bool

	// WaitDelay bounds how long Wait waits, after the process has exited,
	// for the guest side of Stdout and Stderr pipes to close (a background
	// child may keep them open). Zero means no bound, as in os/exec.
	WaitDelay time.Duration

	// noStdio starts the process with descriptors 0, 1 and 2 closed (the
	// idle init, which uses none): no pipes and no relays, so the sandbox
	// stays checkpointable.
	noStdio bool
}

// defaultPath is the search path when the spec sets none, as Docker's.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// validate checks spec for mistakes a caller can fix.
func (spec *ProcessSpec) validate() error {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return errors.New("sentry: ProcessSpec.Argv is empty; name a program to run")
	}
	if spec.Cwd != "" && !path.IsAbs(spec.Cwd) {
		return fmt.Errorf("sentry: working directory %q is not absolute", spec.Cwd)
	}
	for _, e := range spec.Env {
		if !strings.Contains(e, "=") {
			return fmt.Errorf("sentry: environment entry %q has no '='", e)
		}
	}
	if spec.Umask != nil && *spec.Umask > 0o777 {
		return fmt.Errorf("sentry: umask %#o is not a file mode mask; give at most 0o777", *spec.Umask)
	}
	if spec.WaitDelay < 0 {
		return fmt.Errorf("sentry: WaitDelay %v is negative", spec.WaitDelay)
	}
	return nil
}

// environ returns spec.Env with the default PATH added if it has none.
func (spec *ProcessSpec) environ() []string {
	env := append([]string(nil), spec.Env...)
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return env
		}
	}
	return append(env, defaultPath)
}

// cwd returns the working directory, "/" by default.
func (spec *ProcessSpec) cwd() string {
	if spec.Cwd == "" {
		return "/"
	}
	return path.Clean(spec.Cwd)
}

// umask returns the process's file mode creation mask: 022 by default, as
// Docker's processes start with.
func (spec *ProcessSpec) umask() uint {
	if spec.Umask != nil {
		return *spec.Umask
	}
	return 0o022
}

// ExitStatus is how a guest process ended.
type ExitStatus struct {
	// Code is the exit code of a process that exited.
	Code int
	// Signal is the signal that killed the process, or 0 if it exited.
	Signal syscall.Signal
	// OOMKilled is set when the sandbox's OOM killer sent the SIGKILL.
	OOMKilled bool
}

// Exited reports whether the process exited rather than being killed.
func (s ExitStatus) Exited() bool { return s.Signal == 0 }

// ExitCode is the status a shell would report: the exit code, or 128 plus
// the number of the signal that killed the process.
func (s ExitStatus) ExitCode() int {
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.Code
}

// String implements fmt.Stringer.
func (s ExitStatus) String() string {
	if s.OOMKilled {
		return "killed by the OOM killer (memory limit)"
	}
	if s.Signal != 0 {
		return fmt.Sprintf("killed by signal %d (%v)", int(s.Signal), s.Signal)
	}
	return fmt.Sprintf("exit code %d", s.Code)
}
