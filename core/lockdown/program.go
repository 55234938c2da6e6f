package lockdown

import (
	"fmt"
	"math"

	"gvisor.dev/gvisor/pkg/seccomp"
	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	"gvisor.dev/gvisor/pkg/sentry/platform"
	"gvisor.dev/gvisor/runsc/boot/filter/config"
)

// noControlFD is a descriptor number that no open file has; it stands in for
// "no control socket" in gVisor's rules, which always name one.
const noControlFD = math.MaxUint32

// gvisorOptions returns the options of gVisor's rule set for opts: no host
// network, no host filesystem, no device proxies.
func gvisorOptions(opts Options) config.Options {
	g := config.Options{
		Platform:     opts.Platform,
		ControllerFD: noControlFD,
	}
	if opts.ControlFD > 0 {
		g.ControllerFD = uint32(opts.ControlFD)
	}
	if g.Platform == nil {
		g.Platform = platform.StaticSeccompInfo{PlatformName: "none", Filters: seccomp.NewSyscallRules()}
	}
	return g
}

// program returns the allowlist for opts as a seccomp program.
//
// Rules that name run-time values (the control socket, the process ID, the
// platform's variables) take them from g's Vars, which is how precompilation
// substitutes placeholders (see precompiled.go).
func program(g config.Options, opts Options) *seccomp.Program {
	allow, deny := config.Rules(g)
	allow.Merge(extraRules(opts))
	allow.Merge(netRules(opts.Net))
	if opts.ExtraRules.Size() > 0 {
		allow.Merge(opts.ExtraRules.Copy())
	}
	progOpts := config.SeccompOptions(g)
	progOpts.DefaultAction = seccomp.KillProcess
	if opts.TrapViolations {
		progOpts.DefaultAction = seccomp.Trap
	}
	progOpts.BadArchAction = seccomp.KillProcess
	return &seccomp.Program{
		RuleSets: []seccomp.RuleSet{
			// gVisor's deny rules (no new executable mappings) come first
			// and take precedence over any allow rule.
			{Rules: deny, Action: progOpts.DefaultAction},
			{Rules: allow, Action: seccomp.Allow},
		},
		Options: progOpts,
	}
}

// programKey names the structure of the program for opts: everything that
// shapes it except run-time values.
func programKey(g config.Options, opts Options) string {
	key := fmt.Sprintf("%s gvx-control=%t gvx-rules=%d", g.ConfigKey(), opts.ControlFD > 0, extraRulesVersion)
	if opts.Net != NetNone {
		key += fmt.Sprintf(" gvx-net=%s/%d", opts.Net, netRulesVersion)
	}
	return key
}

// placeholderPlatform reports chosen values as the platform's variables, for
// precompilation.
type placeholderPlatform struct {
	platform.SeccompInfo
	vars precompiledseccomp.Values
}

// Variables implements platform.SeccompInfo.Variables.
func (p placeholderPlatform) Variables() precompiledseccomp.Values { return p.vars }
