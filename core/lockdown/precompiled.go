package lockdown

import (
	"os"
	"slices"

	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	"gvisor.dev/gvisor/runsc/boot/filter/config"
)

// Compiling the allowlist takes 15-50 ms, most of a sandbox's cold start.
// The programs for the common configurations are therefore compiled at
// development time (TestPrecompiled with -update writes
// precompiled_<arch>.go) and only their run-time values are filled in here,
// in microseconds.
//
// gVisor's own precompilation cannot be used as is: its rules and the
// systrap platform's read os.Getpid() directly rather than through a
// variable. The generator compiles every program in two processes and
// records where their process IDs land (selfPIDVar); the other run-time
// values (the control socket, the platform's variables) are substituted with
// placeholders as gVisor does. TestPrecompiled checks, in every test run,
// that a rendered program is byte for byte the program compiled here at run
// time.

// precompiledPrograms holds the precompiled programs by programKey; the
// generated precompiled_<arch>.go fills it.
var precompiledPrograms map[string]precompiledseccomp.Program

// selfPIDVar names the offsets of the process ID in a precompiled program.
const selfPIDVar = "gvx_self_pid"

// renderPrecompiled returns the precompiled program for opts with this
// process's values, or false if there is none.
func renderPrecompiled(g config.Options, opts Options) ([]bpf.Instruction, bool) {
	if opts.ExtraRules.Size() > 0 || opts.TrapViolations {
		return nil, false
	}
	p, ok := precompiledPrograms[programKey(g, opts)]
	if !ok {
		return nil, false
	}
	all := runtimeValues(g)
	vals := make(precompiledseccomp.Values, len(p.VarOffsets))
	for name := range p.VarOffsets {
		v, ok := all[name]
		if !ok {
			return nil, false
		}
		vals[name] = v
	}
	// RenderInstructions writes into the program's slice.
	p.Bytecode32 = slices.Clone(p.Bytecode32)
	insns, err := p.RenderInstructions(vals)
	if err != nil {
		return nil, false
	}
	return insns, true
}

// runtimeValues returns every value a program may need in this process.
func runtimeValues(g config.Options) precompiledseccomp.Values {
	vals := g.Vars()
	vals[selfPIDVar] = uint32(os.Getpid())
	return vals
}
