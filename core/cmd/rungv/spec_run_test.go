package main

// Sandboxes run from a --spec file alone.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/spec"
)

// TestRunSpec runs sandboxes described by --spec alone: a command from a
// JSON file, with a volume whose path holds a comma, as no --mount can
// say; and a keep-alive sandbox whose spec comes through an inherited
// pipe, driven through its control socket. Beside --spec, the flags and
// arguments that describe a sandbox are refused, and a bad spec names its
// field.
func TestRunSpec(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	vol := filepath.Join(dir, "a,b.ext4")
	box := spec.Sandbox{
		Image: img, Cmd: []string{"sh", "-c", `echo "$A $(hostname) $(pwd)" > /data,x/f; cat /data,x/f; exit 3`},
		Env: []string{"A=from-spec"}, Hostname: "specbox", Workdir: "/tmp",
		Mounts: []spec.Mount{{Source: vol, Target: "/data,x"}},
	}
	file := filepath.Join(dir, "box.json")
	writeJSON(t, file, box)
	out, errOut, code := runCLI(t, "", "run", "-q", "--spec", file)
	if code != 3 || out != "from-spec specbox /tmp\n" {
		t.Fatalf("rungv run --spec %s: exit %d, stdout %q, stderr %q; want exit 3 and the command's line", file, code, out, errOut)
	}
	if _, err := os.Stat(vol); err != nil {
		t.Errorf("the volume %s was not created: %v", vol, err)
	}

	// Keep-alive, the spec through an inherited pipe, as a caller that
	// writes it while rungv starts would pass it.
	sock := filepath.Join(dir, "box.sock")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "--control", "unix:"+sock, "--spec", "fd:3")
	cmd.ExtraFiles = []*os.File{r}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r.Close()
	if err := json.NewEncoder(w).Encode(spec.Sandbox{Image: img, KeepAlive: true, Env: []string{"B=kept"}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var c *control.Client
	if err := eventually.Wait(60*time.Second, "rungv's control socket "+sock+" answering", func() (bool, error) {
		var err error
		c, err = control.Dial(context.Background(), "unix:"+sock)
		return err == nil, err
	}); err != nil {
		t.Fatalf("%v (rungv's stderr: %s)", err, stderr.String())
	}
	var echo bytes.Buffer
	res, err := c.Exec(context.Background(), control.ExecRequest{Exec: spec.Exec{Argv: []string{"sh", "-c", "echo $B"}}}, control.ExecIO{Stdout: &echo})
	if err != nil || res.ExitCode != 0 || echo.String() != "kept\n" {
		t.Errorf("exec echo in the keep-alive sandbox: %+v %q %v", res, echo.String(), err)
	}
	if err := c.Shutdown(context.Background(), time.Second); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("rungv after shutdown: %v (%s)", err, stderr.String())
	}

	bad := filepath.Join(dir, "bad.json")
	writeJSON(t, bad, map[string]any{"image": img, "memroy": 1})
	huge := filepath.Join(dir, "huge.json")
	writeJSON(t, huge, spec.Sandbox{Image: img, Env: []string{"A=" + strings.Repeat("a", maxSpecSize)}})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--spec", file, img}, "--spec gives the image and the command"},
		{[]string{"--spec", file, "--memory", "1g"}, "--memory describes the sandbox, which --spec gives whole: set memory in the spec instead"},
		{[]string{"--spec", file, "-p", "80"}, "--publish describes the sandbox, which --spec gives whole: set ports in the spec instead"},
		{[]string{"--spec", file, "--env-file", file}, "--env-file describes the sandbox, which --spec gives whole: set env in the spec instead"},
		{[]string{"--spec", bad}, "--spec " + bad + ": sandbox spec: memroy: is not a field of a sandbox spec"},
		{[]string{"--spec", huge}, "more than 1024 KiB"},
		{[]string{"--spec", "fd:1"}, "want fd:N with N >= 3"},
		{[]string{"--spec", filepath.Join(dir, "missing.json")}, "no such file or directory; give fd:N"},
	} {
		_, errOut, code := runCLI(t, "", append([]string{"run", "-q"}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("rungv run %q: exit %d, stderr %q; want exit 1 saying %q", c.args, code, errOut, c.want)
		}
	}
	// The spec's fields, named as the spec names them, from a check after
	// the spec's own.
	writeJSON(t, bad, spec.Sandbox{Image: img, Cmd: []string{"true"}, CPUs: 30000})
	if _, errOut, code := runCLI(t, "", "run", "-q", "--spec", bad); code != 1 || !strings.Contains(errOut, "rungv: sandbox spec: cpus: 30000 is more than the 1024 CPUs") {
		t.Errorf("a spec with 30000 CPUs: exit %d, %q", code, errOut)
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
