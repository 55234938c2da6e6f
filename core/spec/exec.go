package spec

import (
	"errors"
	"fmt"
	"time"
)

// Exec describes a command to run in a sandbox, as one JSON-tagged type
// that every layer of gvx passes along whole: Python builds its JSON, the
// C ABI decodes it, the Go SDK and the control protocol carry it, and
// core/host turns it into the Sentry's process. A new exec option is a
// field here, its check in Validate, and its use in core/host.
//
// An Exec says what runs, not how the caller talks to it: stdin, the
// output's destination and bound, and cancellation belong to the caller's
// options (gvx.ExecOptions, control.ExecRequest).
type Exec struct {
	// Argv is the command line; Argv[0] is looked up in the guest's PATH
	// unless it contains a slash. Required.
	Argv []string `json:"argv"`
	// Env adds "KEY=VALUE" entries to the sandbox's environment,
	// replacing variables of the same name, as `docker exec -e` does.
	Env []string `json:"env,omitempty"`
	// Cwd is the working directory; empty: the sandbox's.
	Cwd string `json:"cwd,omitempty"`
	// User is "uid[:gid]" or a name from the sandbox's /etc/passwd as it
	// is when the exec starts (a user the guest added counts); empty: the
	// sandbox's.
	User string `json:"user,omitempty"`
	// Timeout kills the command, and every process it started, after this
	// long; not the sandbox. 0: never.
	Timeout Seconds `json:"timeout,omitempty"`
	// Umask, when set, is the command's file mode creation mask, 0 to
	// 0o777 (in JSON an integer: 63 for 0o077). Unset: 0o022.
	Umask *int `json:"umask,omitempty"`
	// StderrToStdout makes the command's stderr the same pipe as its
	// stdout, as `2>&1` does, so the two arrive merged on stdout in the
	// order written and stderr is empty. With a TTY they are one terminal
	// already.
	StderrToStdout bool `json:"stderr_to_stdout,omitempty"`
}

// Validate checks e without the sandbox: what every exec needs. It returns
// every problem it finds, each a *FieldError naming the field as the JSON
// does, joined.
func (e *Exec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Spec: "exec", Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if len(e.Argv) == 0 {
		bad("argv", "is empty; give the command to run")
	}
	if e.Timeout < 0 {
		bad("timeout", "%v is negative; give a duration, or 0 for none", time.Duration(e.Timeout))
	}
	if e.Umask != nil && (*e.Umask < 0 || *e.Umask > 0o777) {
		bad("umask", "%d is not a file mode mask; give 0 to 0o777 (511), such as 0o077 (63), or leave it unset for 0o022", *e.Umask)
	}
	return errors.Join(errs...)
}
