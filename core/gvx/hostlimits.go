package gvx

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/internal/hostlimits"
)

// withHostLimitHint wraps err as "gvx: WHAT: err", followed by how to
// raise the host limit it ran into, when it is one.
func withHostLimitHint(what string, err error) error {
	var hint string
	switch {
	case errors.Is(err, unix.EMFILE):
		hint = hostlimits.FileHint()
	case errors.Is(err, unix.ENFILE):
		hint = "the host's table of open files is full (sysctl fs.file-max): close sandboxes or raise it"
	case errors.Is(err, unix.EAGAIN):
		hint = hostlimits.TaskHint()
	}
	if hint != "" {
		return fmt.Errorf("gvx: %s: %w; %s", what, err, hint)
	}
	return fmt.Errorf("gvx: %s: %w", what, err)
}

// crashHint explains a rungv crash report whose cause is a host limit, or
// returns "".
func crashHint(report string) string {
	if !strings.Contains(report, "failed to create new OS thread") {
		return ""
	}
	if hint := hostlimits.TaskHint(); hint != "" {
		return hint
	}
	return fmt.Sprintf("the host refused rungv a thread; each sandbox runs about %d host threads and processes, "+
		"so check the limits on this user's processes (ulimit -u) and this container's pids", hostlimits.TasksPerSandbox)
}
