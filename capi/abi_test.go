package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// buildLibrary builds libgvx.so into a temporary directory with a known
// version string and returns the directory.
func buildLibrary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-ldflags", "-X main.version=abi-test",
		"-o", filepath.Join(dir, "libgvx.so"), ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -buildmode=c-shared: %v\n%s", err, out)
	}
	return dir
}

var (
	prototype = regexp.MustCompile(`(?m)^(?:extern\s+)?([A-Za-z_][\w\s\*]*?)\s*\b(gvx_\w+)\s*\(([^)]*)\)\s*;`)
	paramName = regexp.MustCompile(`\s*\b\w+\s*$`)
)

// prototypes extracts "ret name(types)" for every gvx_ function declared
// in a header, parameter names dropped and spacing normalised.
func prototypes(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	norm := func(s string) string {
		// exports_unsafe.go's typedefs for const parameters.
		s = regexp.MustCompile(`\bcchar_t\b`).ReplaceAllString(s, "const char")
		s = regexp.MustCompile(`\bcuint8_t\b`).ReplaceAllString(s, "const uint8_t")
		s = strings.ReplaceAll(s, "*", " * ")
		return strings.Join(strings.Fields(s), " ")
	}
	out := map[string]string{}
	for _, m := range prototype.FindAllStringSubmatch(string(b), -1) {
		var params []string
		for _, p := range strings.Split(m[3], ",") {
			p = norm(p)
			if p != "void" && p != "" {
				p = norm(paramName.ReplaceAllString(p, ""))
			}
			params = append(params, p)
		}
		out[m[2]] = norm(m[1]) + " " + m[2] + "(" + strings.Join(params, ", ") + ")"
	}
	return out
}

// TestHeaderMatchesCgo checks the hand-written gvx.h against the header
// cgo generates from the //export functions.
func TestHeaderMatchesCgo(t *testing.T) {
	dir := buildLibrary(t)
	generated := prototypes(t, filepath.Join(dir, "libgvx.h"))
	written := prototypes(t, "gvx.h")
	if len(generated) == 0 {
		t.Fatal("found no gvx_ prototypes in cgo's header")
	}
	var names []string
	for name := range generated {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		want := generated[name]
		if got, ok := written[name]; !ok {
			t.Errorf("gvx.h does not declare %s (cgo: %s)", name, want)
		} else if got != want {
			t.Errorf("gvx.h declares %q, cgo exports %q", got, want)
		}
	}
	for name := range written {
		if _, ok := generated[name]; !ok {
			t.Errorf("gvx.h declares %s, which libgvx does not export", name)
		}
	}
}

// compileC compiles a test program against gvx.h and links it with the
// library in dir.
func compileC(t *testing.T, dir, src string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) on PATH")
	}
	exe := filepath.Join(dir, strings.TrimSuffix(filepath.Base(src), ".c"))
	if out, err := exec.Command(cc, "-Wall", "-Werror", "-std=c11", "-I.", "-o", exe, src,
		"-L"+dir, "-lgvx", "-Wl,-rpath,"+dir).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", src, err, out)
	}
	return exe
}

// TestCProgram compiles a C program against gvx.h, links it with
// libgvx.so and runs it.
func TestCProgram(t *testing.T) {
	dir := buildLibrary(t)
	out, err := exec.Command(compileC(t, dir, "testdata/version.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("C program: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "abi-test" {
		t.Fatalf("C program printed %q, want the build's version abi-test", got)
	}
}

// TestCProgramRunsSandbox drives a real sandbox (rungv built from this
// tree, the test image) from C through libgvx.
func TestCProgramRunsSandbox(t *testing.T) {
	dir := buildLibrary(t)
	exe := compileC(t, dir, "testdata/exec.c")
	// make builds rungv once for the whole test run and names it in
	// GVX_TEST_RUNGV; unset, the test builds its own.
	rungv := os.Getenv("GVX_TEST_RUNGV")
	if rungv == "" {
		rungv = filepath.Join(dir, "rungv")
		build := exec.Command("go", "build", "-o", rungv, "../core/cmd/rungv")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building rungv: %v\n%s", err, out)
		}
	}
	// The test image, built by the tool core's tests use (its package is
	// internal to core/).
	refs, err := exec.Command("go", "run", "../core/internal/testimage/mkimage").Output()
	if err != nil {
		t.Fatalf("building the test image: %v", err)
	}
	config, _ := json.Marshal(map[string]any{
		"image": strings.Fields(string(refs))[0], "rungv": rungv, "cache": filepath.Join(dir, "cache"), "keep_alive": true,
	})
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "GVX_TEST_CONFIG="+string(config))
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("C program: %v\n%s", err, out)
	}
}
