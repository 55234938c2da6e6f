// Package lockdown confines the process that hosts a Sentry: it sets
// PR_SET_NO_NEW_PRIVS, drops every capability, and installs a seccomp
// allowlist of exactly the host system calls that the Sentry, its platform,
// netstack, gvx's filesystems and (when asked, Options.Net) gvx's NAT and
// published ports make. A system call outside the list kills
// the whole process with SIGSYS.
//
// The allowlist is gVisor's own (runsc/boot/filter/config, used as a
// library) for a Sentry without host networking and without host
// filesystem access, plus the platform's rules and the few rules gvx adds
// (see rules.go and netrules.go). In particular openat, pipe2, fork and
// execve are denied, and so are socket, bind and listen unless Options.Net
// allows the NAT's TCP and UDP sockets: open every host file and listener
// before Install.
//
// Lockdown is in two steps because capabilities are per thread and the
// platform forks helper processes that inherit them:
//
//	lockdown.DropPrivileges() // before the platform exists
//	f, _ := lockdown.Prepare(opts)
//	f.Install() // after setup, before the first guest instruction
package lockdown

import (
	"fmt"
	"time"

	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp"
	"gvisor.dev/gvisor/pkg/sentry/platform"
)

// Options describe what the locked-down process still needs to do.
type Options struct {
	// Platform is the Sentry platform's seccomp information
	// (platform.Platform.SeccompInfo()). Nil adds no platform rules, which
	// only suits a process that runs no guest (tests).
	Platform platform.SeccompInfo

	// ControlFD is a listening socket on which the process accepts control
	// connections after lockdown. Values <= 0 mean none.
	ControlFD int

	// Net is what the process may do with other host sockets: nothing
	// (NetNone, the default), accept on listeners opened before lockdown
	// (NetPublish), or also dial TCP and UDP (NetNAT). See netRules.
	Net NetAccess

	// ExtraRules are allowed in addition to the built-in list. They force
	// compiling the filter at run time (tens of milliseconds).
	ExtraRules seccomp.SyscallRules

	// TrapViolations makes a violation deliver a catchable SIGSYS instead of
	// killing the process, so the Go runtime prints the offending goroutine's
	// stack. Only for debugging a missing rule.
	TrapViolations bool
}

// Filter is a compiled seccomp program ready to install.
type Filter struct {
	insns       []bpf.Instruction
	buildTime   time.Duration
	precompiled bool
}

// Prepare returns the allowlist for opts. The common configurations are
// precompiled into this package and only need the process's values filled
// in; others are compiled here. Prepare makes no change to the process and
// may run concurrently with other setup.
func Prepare(opts Options) (*Filter, error) {
	start := time.Now()
	if !opts.Net.valid() {
		return nil, fmt.Errorf("lockdown: unknown Options.Net %d; use NetNone, NetPublish or NetNAT", int(opts.Net))
	}
	g := gvisorOptions(opts)
	if insns, ok := renderPrecompiled(g, opts); ok {
		return &Filter{insns: insns, buildTime: time.Since(start), precompiled: true}, nil
	}
	insns, _, err := program(g, opts).Build()
	if err != nil {
		return nil, fmt.Errorf("lockdown: compiling the seccomp allowlist: %w", err)
	}
	return &Filter{insns: insns, buildTime: time.Since(start)}, nil
}

// Len returns the number of BPF instructions in f.
func (f *Filter) Len() int { return len(f.insns) }

// BuildTime returns how long Prepare took to produce f.
func (f *Filter) BuildTime() time.Duration { return f.buildTime }

// Precompiled reports whether f came from a precompiled program.
func (f *Filter) Precompiled() bool { return f.precompiled }

// Install drops privileges (see DropPrivileges), loads what the standard
// library would open lazily (the local time zone), and installs f on every
// thread of the process. It cannot be undone.
func (f *Filter) Install() error {
	if err := DropPrivileges(); err != nil {
		return err
	}
	preload()
	if err := seccomp.SetFilter(f.insns); err != nil {
		return fmt.Errorf("lockdown: installing the seccomp filter: %w", err)
	}
	return nil
}

// Install compiles and installs the allowlist for opts in one step.
func Install(opts Options) error {
	f, err := Prepare(opts)
	if err != nil {
		return err
	}
	return f.Install()
}
