package sentry

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/errors/linuxerr"
	"gvisor.dev/gvisor/pkg/sentry/arch"
	"gvisor.dev/gvisor/pkg/sentry/kernel"
)

// TestHostRefusalsAsEAGAIN: systrap's errors for a host process or thread
// it could not create become EAGAIN for the guest; other errors and results
// pass through unchanged, so a real Sentry bug still surfaces.
func TestHostRefusalsAsEAGAIN(t *testing.T) {
	other := errors.New("something else")
	for _, tc := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("createSysmsgThread: failed to get clone"), linuxerr.EAGAIN},
		{fmt.Errorf("createStub: failed to get clone"), linuxerr.EAGAIN},
		{fmt.Errorf("creating stub process: %v", "resource temporarily unavailable"), linuxerr.EAGAIN},
		{fmt.Errorf("subprocess has too many active tasks (%d); failed to create a new one", 4096), linuxerr.EAGAIN},
		{other, other},
		{linuxerr.ENOMEM, linuxerr.ENOMEM},
		{nil, nil},
	} {
		fn := hostRefusalsAsEAGAIN(func(*kernel.Task, uintptr, arch.SyscallArguments) (uintptr, *kernel.SyscallControl, error) {
			if tc.err == nil {
				return 42, nil, nil
			}
			return 0, nil, tc.err
		})
		rv, _, err := fn(nil, 56, arch.SyscallArguments{})
		if err != tc.want {
			t.Errorf("clone failing with %v returns %v, want %v", tc.err, err, tc.want)
		}
		if tc.err == nil && rv != 42 {
			t.Errorf("a successful clone returns %d, want 42", rv)
		}
	}
}

// TestPlatformHintNamesPtrace: a platform that could not attach to its stub
// processes (a container's seccomp profile without ptrace) is explained by
// ptrace, not by the task limits a refused process would be.
func TestPlatformHintNamesPtrace(t *testing.T) {
	denied := fmt.Errorf("initialize systrap: unable to attach: %w", unix.EPERM)
	if hint := withPlatformHint(denied); !strings.Contains(hint, "ptrace") || strings.Contains(hint, "RLIMIT_NPROC") {
		t.Errorf("hint for %v: %q; want it to name ptrace", denied, hint)
	}
	if hint := withPlatformHint(errors.New("creating stub process: resource temporarily unavailable")); strings.Contains(hint, "ptrace") {
		t.Errorf("a refused process is explained by ptrace: %q", hint)
	}
}
