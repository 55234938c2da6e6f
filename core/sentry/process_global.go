package sentry

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

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
	// processPlatform is the platform of the process's first sandbox.
	// Platforms keep process-wide state (stub processes, signal
	// handlers); creating ptrace's stubs after systrap's panics inside
	// gVisor, so a process sticks to one.
	processPlatform Platform

	// processBuildID identifies this executable's build in the snapshots
	// it writes and reads (executableBuildID), or processBuildIDErr says
	// why it could not be read. Set by initGlobal.
	processBuildID    string
	processBuildIDErr error
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
		// Only snapshots need it, so a host where it cannot be read
		// still boots sandboxes.
		processBuildID, processBuildIDErr = executableBuildID()
		installPidsLimiter()
		installFallocate()
		installOpenRestart()
		installLog()
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
	if processPlatform != "" && processPlatform != s.cfg.Platform {
		return fmt.Errorf("sentry: this process already ran a %s sandbox; a process uses one platform, so start another process for %s", processPlatform, s.cfg.Platform)
	}
	processPlatform = s.cfg.Platform
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

// logTarget receives gVisor's log; configureLog points it at a sandbox's
// Config.LogWriter.
var logTarget switchWriter

// switchWriter is an io.Writer whose destination can change while other
// goroutines write to it.
type switchWriter struct {
	w atomic.Pointer[io.Writer]
}

// Write implements io.Writer.
func (s *switchWriter) Write(b []byte) (int, error) {
	if w := s.w.Load(); w != nil {
		return (*w).Write(b)
	}
	return len(b), nil
}

var _ io.Writer = (*switchWriter)(nil)

// installLog routes gVisor's log through logTarget. It edits the global
// logger in place rather than calling log.SetTarget: rate-limited loggers
// created at package init keep a pointer to the original logger and would
// otherwise still write to stderr.
//
// Preconditions: no kernel is running (called once, from initGlobal).
func installLog() {
	log.Log().Emitter = log.GoogleEmitter{Writer: &log.Writer{Next: &logTarget}}
}

// configureLog points gVisor's process-wide log at w (nil discards it).
func configureLog(w io.Writer, debug bool) {
	if w == nil {
		logTarget.w.Store(nil)
	} else {
		logTarget.w.Store(&w)
	}
	if debug {
		log.SetLevel(log.Debug)
	} else {
		log.SetLevel(log.Info)
	}
}
