package sentry

import (
	"fmt"
	"io"
	"sync"

	"gvisor.dev/gvisor/pkg/cpuid"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/rand"
	"gvisor.dev/gvisor/pkg/sentry/usage"
	"gvisor.dev/gvisor/pkg/sighandling"
)

// Process-wide state. gVisor keeps memory accounting, the syscall table and
// the platform's stub pool in globals, so one process hosts one sandbox at a
// time.
var (
	globalInitOnce sync.Once
	globalInitErr  error

	liveMu sync.Mutex
	// live is the sandbox currently using the process-wide state, or nil.
	live *Sandbox
)

// initGlobal prepares the process-wide parts of gVisor once.
func initGlobal() error {
	globalInitOnce.Do(func() {
		cpuid.Initialize()
		// rand.Init pre-opens /dev/urandom where getrandom(2) is missing;
		// it must run before lockdown denies openat.
		if err := rand.Init(); err != nil {
			globalInitErr = fmt.Errorf("sentry: initialising the random source: %w", err)
			return
		}
		if err := usage.Init(); err != nil {
			globalInitErr = fmt.Errorf("sentry: initialising memory accounting: %w", err)
			return
		}
		// Platforms such as ptrace make the host deliver a flood of
		// useless SIGCHLD stop notifications.
		if err := sighandling.IgnoreChildStop(); err != nil {
			globalInitErr = fmt.Errorf("sentry: ignoring child stop signals: %w", err)
			return
		}
		installPidsLimiter()
	})
	return globalInitErr
}

// claimProcess makes s the process's live sandbox.
func claimProcess(s *Sandbox) error {
	liveMu.Lock()
	defer liveMu.Unlock()
	if live != nil {
		return ErrBusy
	}
	live = s
	return nil
}

// releaseProcess gives up s's claim on the process.
func releaseProcess(s *Sandbox) {
	liveMu.Lock()
	defer liveMu.Unlock()
	if live == s {
		live = nil
	}
}

// configureLog points gVisor's process-wide log at w.
func configureLog(w io.Writer, debug bool) {
	if w == nil {
		w = io.Discard
	}
	log.SetTarget(log.GoogleEmitter{Writer: &log.Writer{Next: w}})
	if debug {
		log.SetLevel(log.Debug)
	} else {
		log.SetLevel(log.Info)
	}
}
