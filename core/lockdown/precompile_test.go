package lockdown

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"testing"

	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
	"gvisor.dev/gvisor/pkg/sentry/platform"

	// The platforms to precompile for.
	_ "gvisor.dev/gvisor/pkg/sentry/platform/kvm"
	_ "gvisor.dev/gvisor/pkg/sentry/platform/ptrace"
	_ "gvisor.dev/gvisor/pkg/sentry/platform/systrap"
)

var update = flag.Bool("update", false, "regenerate precompiled_"+runtime.GOARCH+".go")

// precompileTarget is one configuration to precompile.
type precompileTarget struct {
	opts Options
	key  string
	// vars are the names of the placeholder-substituted variables.
	vars []string
}

// precompileTargets lists the configurations a sandbox uses: each platform,
// with and without a control socket, at each level of host socket access.
func precompileTargets(t testing.TB) []precompileTarget {
	var out []precompileTarget
	for _, name := range []string{"systrap", "ptrace", "kvm"} {
		ctor, err := platform.Lookup(name)
		if err != nil {
			t.Fatalf("platform %s: %v", name, err)
		}
		for _, si := range ctor.PrecompiledSeccompInfo() {
			for _, control := range []bool{false, true} {
				for _, net := range []NetAccess{NetNone, NetPublish, NetNAT} {
					opts := Options{Platform: si, Net: net}
					if control {
						opts.ControlFD = 3
					}
					g := gvisorOptions(opts)
					vars := []string{"controller_fd"}
					for v := range si.Variables() {
						vars = append(vars, v)
					}
					sort.Strings(vars)
					out = append(out, precompileTarget{opts: opts, key: programKey(g, opts), vars: vars})
				}
			}
		}
	}
	return out
}

// placeholders returns distinctive values for vars, well above any process
// ID or syscall number.
func placeholders(vars []string, base uint32) precompiledseccomp.Values {
	vals := precompiledseccomp.Values{}
	for i, v := range vars {
		vals[v] = base + 2*uint32(i)
	}
	return vals
}

// compileWith compiles target with the given placeholder values.
func compileWith(t testing.TB, target precompileTarget, vals precompiledseccomp.Values) []uint32 {
	g := gvisorOptions(target.opts)
	g.ControllerFD = vals["controller_fd"]
	platVars := precompiledseccomp.Values{}
	for v := range target.opts.Platform.Variables() {
		platVars[v] = vals[v]
	}
	g.Platform = placeholderPlatform{SeccompInfo: target.opts.Platform, vars: platVars}
	insns, _, err := program(g, target.opts).Build()
	if err != nil {
		t.Fatalf("compiling %s: %v", target.key, err)
	}
	return toUint32(insns)
}

// toUint32 encodes insns as precompiledseccomp stores them.
func toUint32(insns []bpf.Instruction) []uint32 {
	code := bpf.ToBytecode(insns)
	out := make([]uint32, len(code)/4)
	for i := range out {
		out[i] = binary.NativeEndian.Uint32(code[4*i:])
	}
	return out
}

const (
	placeholderBase1 = 0x13371337
	placeholderBase2 = 0x42424243
)

// compiledSet is what one process compiled, for the two-process comparison.
type compiledSet struct {
	PID      uint32
	Programs map[string][]uint32
}

// runPrecompileChild compiles every target with the second placeholder set
// and prints the result (helper mode "precompile").
func runPrecompileChild() int {
	set := compiledSet{PID: uint32(os.Getpid()), Programs: map[string][]uint32{}}
	for _, target := range precompileTargets(fatalTB{}) {
		set.Programs[target.key] = compileWith(fatalTB{}, target, placeholders(target.vars, placeholderBase2))
	}
	if err := json.NewEncoder(os.Stdout).Encode(set); err != nil {
		return 1
	}
	return 0
}

// TestPrecompiled checks the generated programs against programs compiled
// now, or regenerates them with -update.
func TestPrecompiled(t *testing.T) {
	targets := precompileTargets(t)
	if *update {
		generate(t, targets)
		return
	}
	if runtime.GOARCH != "amd64" {
		t.Skipf("no precompiled programs for %s yet", runtime.GOARCH)
	}
	for _, target := range targets {
		p, ok := precompiledPrograms[target.key]
		if !ok {
			t.Errorf("no precompiled program for %q; run `go test ./core/lockdown -run TestPrecompiled -update`", target.key)
			continue
		}
		g := gvisorOptions(target.opts)
		rendered, ok := renderPrecompiled(g, target.opts)
		if !ok {
			t.Errorf("%s: cannot render the precompiled program (variables %v)", target.key, p.VarOffsets)
			continue
		}
		fresh, _, err := program(g, target.opts).Build()
		if err != nil {
			t.Fatal(err)
		}
		if !equalInsns(rendered, fresh) {
			t.Errorf("%s: the precompiled program differs from the one compiled now; gVisor's rules changed? Run `go test ./core/lockdown -run TestPrecompiled -update`", target.key)
		}
	}
	// The sandbox's default configuration is served precompiled.
	ctor, _ := platform.Lookup("systrap")
	f, err := Prepare(Options{Platform: ctor.PrecompiledSeccompInfo()[0]})
	if err != nil || !f.Precompiled() {
		t.Errorf("Prepare(systrap): precompiled %v, err %v", f != nil && f.Precompiled(), err)
	} else {
		t.Logf("systrap allowlist rendered in %v (%d instructions)", f.BuildTime(), f.Len())
	}
}

func equalInsns(a, b []bpf.Instruction) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// generate compiles every target here and in a child process and writes
// the programs with the offsets of their run-time values.
func generate(t *testing.T, targets []precompileTarget) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"=precompile")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("precompile child: %v", err)
	}
	var other compiledSet
	if err := json.Unmarshal(out, &other); err != nil {
		t.Fatal(err)
	}
	pid := uint32(os.Getpid())
	if pid == other.PID {
		t.Fatal("the two compilations ran in the same process")
	}
	var src bytes.Buffer
	fmt.Fprintf(&src, "// Code generated by `go test ./core/lockdown -run TestPrecompiled -update`; DO NOT EDIT.\n\n")
	fmt.Fprintf(&src, "package lockdown\n\nimport \"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp\"\n\n")
	fmt.Fprintf(&src, "func init() {\n\tprecompiledPrograms = map[string]precompiledseccomp.Program{\n")
	for _, target := range targets {
		vals1 := placeholders(target.vars, placeholderBase1)
		vals2 := placeholders(target.vars, placeholderBase2)
		a := compileWith(t, target, vals1)
		b := other.Programs[target.key]
		offsets, err := varOffsets(a, b, target.vars, vals1, vals2, pid, other.PID)
		if err != nil {
			t.Fatalf("%s: %v", target.key, err)
		}
		p := precompiledseccomp.Program{Name: target.key, Bytecode32: a, VarOffsets: offsets}
		fmt.Fprintf(&src, "\t\t%q: %s,\n", target.key, p.Expr("\t\t", "precompiledseccomp"))
	}
	fmt.Fprintf(&src, "\t}\n}\n")
	name := "precompiled_" + runtime.GOARCH + ".go"
	if err := os.WriteFile(name, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s with %d programs; run the tests again to check it", name, len(targets))
}

// varOffsets explains every difference between the program compiled in
// this process (a) and in the child (b) as a variable: a placeholder or the
// process ID. Anything else means the program's structure depends on
// run-time values, which precompilation cannot handle.
func varOffsets(a, b []uint32, vars []string, vals1, vals2 precompiledseccomp.Values, pidA, pidB uint32) (map[string][]int, error) {
	if len(a) != len(b) {
		return nil, fmt.Errorf("programs differ in length (%d vs %d words)", len(a), len(b))
	}
	offsets := map[string][]int{selfPIDVar: nil}
	for _, v := range vars {
		offsets[v] = nil
	}
	for i := range a {
		if a[i] == b[i] {
			for _, v := range vars {
				if a[i] == vals1[v] {
					return nil, fmt.Errorf("placeholder of %s at word %d did not change", v, i)
				}
			}
			continue
		}
		found := false
		for _, v := range vars {
			if a[i] == vals1[v] && b[i] == vals2[v] {
				offsets[v] = append(offsets[v], i)
				found = true
			}
		}
		if !found && a[i] == pidA && b[i] == pidB {
			offsets[selfPIDVar] = append(offsets[selfPIDVar], i)
			found = true
		}
		if !found {
			return nil, fmt.Errorf("word %d differs (%#x vs %#x) for no known variable", i, a[i], b[i])
		}
	}
	// Drop variables that do not occur: RenderInstructions wants exactly
	// the ones present.
	for v, o := range offsets {
		if len(o) == 0 {
			delete(offsets, v)
		}
	}
	return offsets, nil
}

// fatalTB is a testing.TB stand-in for the child process.
type fatalTB struct{ testing.TB }

func (fatalTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
