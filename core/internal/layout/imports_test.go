package layout

import (
	"bytes"
	"encoding/json"
	"errors"

	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// gvisor is the prefix of gVisor's packages.
const gvisor = "gvisor.dev/"

// TestGVisorStaysBehindTheLibraries keeps gVisor's packages behind core's
// own: the rungv command builds on core/sentry and core/host, and the SDK
// (core/gvx) and the C library (capi) drive rungv from outside, so none of
// them names a gVisor package itself.
func TestGVisorStaysBehindTheLibraries(t *testing.T) {
	for _, rule := range []struct {
		pkg string
		cgo bool
		// closure also checks every package pkg builds on, allowing
		// only these gVisor packages; nil checks pkg's own imports.
		closure []string
	}{
		{pkg: "z.gfire.dev/gvx/core/cmd/rungv"},
		{pkg: "z.gfire.dev/gvx/core/gvx", closure: []string{}},
		// capi reaches gVisor's cleanup helper through core/ext4lite,
		// and nothing else of it.
		{pkg: "z.gfire.dev/gvx/capi", cgo: true, closure: []string{"gvisor.dev/gvisor/pkg/cleanup"}},
	} {
		pkgs := goList(t, rule.pkg, rule.cgo)
		root := pkgs[rule.pkg]
		if root == nil {
			t.Fatalf("go list did not describe %s", rule.pkg)
		}
		if rule.closure == nil {
			for _, e := range gvisorImports(t, root) {
				t.Errorf("%s imports %s; only core's libraries (core/sentry, core/host, ...) may import gVisor: move the code that needs it there", e.file, e.path)
			}
			continue
		}
		for _, dep := range append([]string{rule.pkg}, root.Deps...) {
			p := pkgs[dep]
			if p == nil || strings.HasPrefix(dep, gvisor) {
				continue
			}
			for _, e := range gvisorImports(t, p) {
				if slices.Contains(rule.closure, e.path) {
					continue
				}
				t.Errorf("%s builds on gVisor: %s imports %s (%s); keep the Sentry out of it, or say why here", rule.pkg, e.file, e.path, strings.Join(importChain(pkgs, rule.pkg, dep), " -> "))
			}
		}
	}
}

// listedPackage is what go list -json says of a package.
type listedPackage struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
	Deps       []string
}

// goList describes pkg and every package it builds on, by import path, as
// `go build` sees them with cgo on or off.
func goList(t *testing.T, pkg string, cgo bool) map[string]*listedPackage {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Dir,GoFiles,CgoFiles,Imports,Deps", pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+map[bool]string{true: "1", false: "0"}[cgo])
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, stderr.String())
	}
	pkgs := map[string]*listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(listedPackage)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatalf("go list %s: decoding its output: %v", pkg, err)
		}
		pkgs[p.ImportPath] = p
	}
}

// fileImport is one import of a gVisor package by a source file.
type fileImport struct {
	file string // relative to the module's root when inside it
	path string
}

// gvisorImports returns the gVisor packages p's source files import, with
// the file that imports each.
func gvisorImports(t *testing.T, p *listedPackage) []fileImport {
	t.Helper()
	if !slices.ContainsFunc(p.Imports, func(s string) bool { return strings.HasPrefix(s, gvisor) }) {
		return nil
	}
	var out []fileImport
	fset := token.NewFileSet()
	for _, name := range append(slices.Clone(p.GoFiles), p.CgoFiles...) {
		path := filepath.Join(p.Dir, name)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parsing %s: %v", path, err)
		}
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err == nil && strings.HasPrefix(ip, gvisor) {
				out = append(out, fileImport{file: relToModule(path), path: ip})
			}
		}
	}
	return out
}

// importChain returns the shortest chain of imports from one package to
// another, both in pkgs.
func importChain(pkgs map[string]*listedPackage, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		if at == to {
			var chain []string
			for ; at != ""; at = prev[at] {
				chain = append(chain, at)
			}
			slices.Reverse(chain)
			return chain
		}
		if p := pkgs[at]; p != nil {
			for _, next := range p.Imports {
				if _, seen := prev[next]; !seen {
					prev[next] = at
					queue = append(queue, next)
				}
			}
		}
	}
	return []string{from, "...", to}
}

// relToModule names path relative to the module's root, three
// directories up from this package's.
func relToModule(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if rel, err := filepath.Rel(filepath.Join(wd, "..", "..", ".."), path); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return path
}

// maxCommandFileLines bounds the length of rungv's source files, tests
// included.
const maxCommandFileLines = 300

// TestRungvIsFlagsAndOutput keeps rungv a command: flags, output and exit
// codes, in files a reader takes in whole. What running a sandbox means
// (booting it, serving it, stopping it) lives in core/host, so a file of
// rungv's that grows past maxCommandFileLines has taken on more than
// that: split it by concern, or move the logic to core's libraries. Its
// test files are held to the same bound, so that each holds one concern's
// tests and the helpers several share live in files of helpers.
func TestRungvIsFlagsAndOutput(t *testing.T) {
	const pkg = "z.gfire.dev/gvx/core/cmd/rungv"
	p := goList(t, pkg, false)[pkg]
	if p == nil {
		t.Fatalf("go list did not describe %s", pkg)
	}
	// Every .go file, whatever its build constraints: tests and files
	// go list leaves out under CGO_ENABLED=0 too.
	paths, err := filepath.Glob(filepath.Join(p.Dir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("listing %s's .go files: %v (found %d)", p.Dir, err, len(paths))
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("\n")); n > maxCommandFileLines {
			t.Errorf("%s has %d lines; no .go file of core/cmd/rungv, tests included, may have more than %d: split it by concern (a test file into files of one concern each, with shared helpers in a file of helpers), or move what is not flags, output or exit codes to core/host", relToModule(path), n, maxCommandFileLines)
		}
	}
}

// TestSDKCallersNeedNoProtocol keeps the Go SDK whole: what its callers
// use — the C library, the examples, the benchmarks — comes from core/gvx
// (and core/spec, the sandbox's description), never from the control
// protocol underneath it, whose results and errors the SDK names itself.
func TestSDKCallersNeedNoProtocol(t *testing.T) {
	const protocol = "z.gfire.dev/gvx/core/control"
	for _, rule := range []struct {
		pkg string
		cgo bool
	}{
		{pkg: "z.gfire.dev/gvx/capi", cgo: true},
		{pkg: "z.gfire.dev/gvx/examples/..."},
		{pkg: "z.gfire.dev/gvx/benchmarks/..."},
	} {
		cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", rule.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+map[bool]string{true: "1", false: "0"}[rule.cgo])
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", rule.pkg, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fields := strings.Fields(line)
			if len(fields) > 0 && slices.Contains(fields[1:], protocol) {
				t.Errorf("%s imports %s: use what core/gvx names (its result types, IsCode and the Code constants) instead", fields[0], protocol)
			}
		}
	}
}
