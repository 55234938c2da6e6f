// Package lockdown confines the process that hosts a Sentry: it sets
// PR_SET_NO_NEW_PRIVS, drops every capability, and installs a seccomp
// allowlist of exactly the host system calls that the Sentry, its platform,
// netstack and gvx's filesystems make. A system call outside the list kills
// the whole process with SIGSYS.
//
// The allowlist is gVisor's own (runsc/boot/filter/config, used as a
// library) for a Sentry without host networking and without host
// filesystem access, plus the platform's rules and the few rules gvx adds
// (ExtraRules). In particular openat, socket, pipe2, fork and execve are
// denied: open every host file before Install.
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
	"math"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp"
	"gvisor.dev/gvisor/pkg/sentry/platform"
	"gvisor.dev/gvisor/runsc/boot/filter/config"
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

	// ExtraRules are allowed in addition to the built-in list.
	ExtraRules seccomp.SyscallRules

	// TrapViolations makes a violation deliver a catchable SIGSYS instead of
	// killing the process, so the Go runtime prints the offending goroutine's
	// stack. Only for debugging a missing rule.
	TrapViolations bool
}

// Filter is a compiled seccomp program ready to install.
type Filter struct {
	insns     []bpf.Instruction
	buildTime time.Duration
}

// noControlFD is a descriptor number that no open file has; it stands in for
// "no control socket" in gVisor's rules, which always name one.
const noControlFD = math.MaxUint32

// Prepare compiles the allowlist for opts. It makes no change to the process
// and may run concurrently with other setup.
func Prepare(opts Options) (*Filter, error) {
	start := time.Now()
	gopts := config.Options{
		Platform:     opts.Platform,
		ControllerFD: noControlFD,
	}
	if opts.ControlFD > 0 {
		gopts.ControllerFD = uint32(opts.ControlFD)
	}
	if opts.Platform == nil {
		gopts.Platform = platform.StaticSeccompInfo{PlatformName: "none", Filters: seccomp.NewSyscallRules()}
	}
	allow, deny := config.Rules(gopts)
	allow.Merge(extraRules(opts))
	allow.Merge(opts.ExtraRules)

	progOpts := config.SeccompOptions(gopts)
	if opts.TrapViolations {
		progOpts.DefaultAction = seccomp.Trap
	} else {
		progOpts.DefaultAction = seccomp.KillProcess
	}
	progOpts.BadArchAction = seccomp.KillProcess
	prog := &seccomp.Program{
		RuleSets: []seccomp.RuleSet{
			// gVisor's deny rules (no new executable mappings) come first
			// and take precedence over any allow rule.
			{Rules: deny, Action: progOpts.DefaultAction},
			{Rules: allow, Action: seccomp.Allow},
		},
		Options: progOpts,
	}
	insns, _, err := prog.Build()
	if err != nil {
		return nil, fmt.Errorf("lockdown: compiling the seccomp allowlist: %w", err)
	}
	return &Filter{insns: insns, buildTime: time.Since(start)}, nil
}

// Len returns the number of BPF instructions in f.
func (f *Filter) Len() int { return len(f.insns) }

// BuildTime returns how long Prepare took to compile f.
func (f *Filter) BuildTime() time.Duration { return f.buildTime }

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

// DropPrivileges sets PR_SET_NO_NEW_PRIVS and clears every capability set
// (effective, permitted, inheritable, ambient and, where CAP_SETPCAP allows,
// bounding) on every thread of the process. It is idempotent and needs no
// privilege.
func DropPrivileges() error {
	if err := allThreadsPrctl(unix.PR_SET_NO_NEW_PRIVS, 1); err != nil {
		return fmt.Errorf("lockdown: setting PR_SET_NO_NEW_PRIVS: %w", err)
	}
	if err := dropBoundingSet(); err != nil {
		return err
	}
	if err := allThreadsPrctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL); err != nil && err != unix.EINVAL {
		// EINVAL: the kernel predates ambient capabilities, so there are
		// none to clear.
		return fmt.Errorf("lockdown: clearing ambient capabilities: %w", err)
	}
	if err := clearCapabilities(); err != nil {
		return fmt.Errorf("lockdown: clearing capabilities: %w", err)
	}
	return nil
}

// dropBoundingSet removes every capability from the bounding set if the
// process may (CAP_SETPCAP). The bounding set is per thread but is only
// consulted at execve, which the filter denies; dropping it is defence in
// depth, so lacking CAP_SETPCAP is not an error.
func dropBoundingSet() error {
	has, err := hasEffectiveCap(unix.CAP_SETPCAP)
	if err != nil {
		return fmt.Errorf("lockdown: reading capabilities: %w", err)
	}
	if !has {
		return nil
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := allThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c)); err != nil && err != unix.EINVAL {
			return fmt.Errorf("lockdown: dropping capability %d from the bounding set: %w", c, err)
		}
	}
	return nil
}
