package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/internal/testimage"
)

var rungvBinary string

// rungvBinaryEnv hands the binary built by TestMain to a copy of the test
// binary that a test re-executes (privateMountNS), so it is built once.
const rungvBinaryEnv = "RUNGV_TEST_BINARY"

func TestMain(m *testing.M) {
	if p := os.Getenv(rungvBinaryEnv); p != "" {
		rungvBinary = p
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "rungv-cli-test-")
	if err != nil {
		panic(err)
	}
	// make test-go builds rungv once for the whole run and names it in
	// GVX_TEST_RUNGV; unset, the tests build their own.
	rungvBinary = os.Getenv("GVX_TEST_RUNGV")
	if rungvBinary == "" {
		rungvBinary = filepath.Join(dir, "rungv")
		cmd := exec.Command("go", "build", "-o", rungvBinary, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Stderr.Write(out)
			panic(err)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// rungv runs the CLI with a private cache and returns stdout, stderr and
// the exit code.
func rungv(t *testing.T, cache string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(rungvBinary, append([]string{"--cache", cache}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

func TestImageCommands(t *testing.T) {
	b, err := testimage.Build()
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()

	out, errOut, code := rungv(t, cache, "pull", b.LayoutRef())
	if code != 0 {
		t.Fatalf("pull: exit %d\n%s", code, errOut)
	}
	id := strings.TrimSpace(out)
	if !strings.HasPrefix(id, "sha256:") {
		t.Fatalf("pull printed %q, want the image ID", out)
	}
	for _, want := range []string{"layer 3/3", "Converted 3 layers", "2 files carry xattrs (security.capability, trusted.*, user.*)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("pull progress lacks %q:\n%s", want, errOut)
		}
	}
	if out, errOut, _ = rungv(t, cache, "pull", "-q", b.ArchiveRef()); strings.TrimSpace(out) != id || errOut != "" {
		t.Errorf("pull -q of the archive: %q %q, want only %s", out, errOut, id)
	}

	out, _, _ = rungv(t, cache, "images")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "REFERENCE") {
		t.Errorf("images: want a header and two references:\n%s", out)
	}
	out, _, _ = rungv(t, cache, "images", "--format", "json")
	var rows []struct {
		ID    string   `json:"id"`
		Refs  []string `json:"refs"`
		Erofs string   `json:"erofs"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].ID != id || len(rows[0].Refs) != 2 {
		t.Fatalf("images --format json: %v\n%s", err, out)
	}
	if _, err := os.Stat(rows[0].Erofs); err != nil {
		t.Errorf("the listed EROFS path: %v", err)
	}

	short := strings.TrimPrefix(id, "sha256:")[:12]
	out, _, code = rungv(t, cache, "rmi", short)
	if code != 0 || !strings.Contains(out, "Untagged: ") || !strings.Contains(out, "Deleted: "+id) {
		t.Errorf("rmi by ID: exit %d\n%s", code, out)
	}
	_, errOut, code = rungv(t, cache, "rmi", short)
	if code != 1 || !strings.Contains(errOut, "no such image") {
		t.Errorf("rmi of a removed image: exit %d, %q", code, errOut)
	}

	_, errOut, code = rungv(t, cache, "prune")
	if code == 0 || !strings.Contains(errOut, "pass -f") {
		t.Errorf("prune without -f and without a terminal: exit %d %q", code, errOut)
	}
	if out, _, code = rungv(t, cache, "prune", "-f"); code != 0 || !strings.Contains(out, "Reclaimed") {
		t.Errorf("prune -f: exit %d %q", code, out)
	}
}

func TestPullErrorsSayWhatToDo(t *testing.T) {
	cache := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"pull", "oci:"}, "names no directory"},
		{[]string{"pull", "oci:/nonexistent/layout"}, "no such file or directory"},
		{[]string{"pull", "http://127.0.0.1:1/x"}, "drop the URL scheme"},
		{[]string{"pull", "--platform", "bogus", "x"}, "want OS/ARCH"},
		{[]string{"pull"}, "accepts 1 arg"},
	}
	for _, c := range cases {
		_, errOut, code := rungv(t, cache, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("rungv %v: exit %d, stderr %q; want an error saying %q", c.args, code, errOut, c.want)
		}
	}
}

// TestFlagValueNames keeps --help readable: pflag takes a flag's value
// name from the first `quoted` word of its usage, so a quoted phrase there
// shows as "--restore rungv checkpoint".
func TestFlagValueNames(t *testing.T) {
	var visit func(c *cobra.Command)
	visit = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " \t") {
				t.Errorf("rungv %s --%s shows its value as %q in --help; quote one word (FILE) or none", c.Name(), f.Name, name)
			}
		})
		for _, sub := range c.Commands() {
			visit(sub)
		}
	}
	visit(newRootCommand())
}
