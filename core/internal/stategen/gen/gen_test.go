package gen

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGeneratedStateIsCurrent regenerates every package that asks for
// stategen and compares with the committed output, so a savable type
// whose fields changed without `go generate` fails here, not in a
// restore.
func TestGeneratedStateIsCurrent(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "z.gfire.dev/gvx/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, dir := range strings.Fields(string(out)) {
		want, err := os.ReadFile(filepath.Join(dir, OutputName))
		if os.IsNotExist(err) {
			if usesStategen(t, dir) {
				t.Errorf("%s has a go:generate line for stategen but no %s; run go generate there", dir, OutputName)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := Generate(dir)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale; run `go generate %s`", filepath.Join(dir, OutputName), dir)
		}
		checked++
	}
	if checked < 3 {
		t.Fatalf("checked %d packages; want at least core/sentry, core/sentry/ext4fs and the sample", checked)
	}
}

// generateLine is the go:generate directive that runs stategen.
var generateLine = regexp.MustCompile(`(?m)^//go:generate go run z\.gfire\.dev/gvx/core/internal/stategen\b`)

func usesStategen(t *testing.T, dir string) bool {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if generateLine.Match(b) {
			return true
		}
	}
	return false
}

// TestRefusesWhatItCannotGenerate checks the generator's errors name the
// type and the problem.
func TestRefusesWhatItCannotGenerate(t *testing.T) {
	for name, src := range map[string]string{
		"is not a struct":   "// +stateify savable\ntype T int\n",
		"unknown state tag": "// +stateify savable\ntype T struct {\n\tA int `state:\"zerovalue\"`\n}\n",
		"is generic":        "// +stateify savable\ntype T[X any] struct{ A X }\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/p\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte("package p\n\n"+src), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Generate(dir)
		if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "T") {
			t.Errorf("Generate(%q) = %v; want an error saying T %s", src, err, name)
		}
	}
}
