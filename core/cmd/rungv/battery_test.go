package main

// What the malformed-input parts of the reliability battery (issue 17)
// share: hostile input goes to the real rungv binary, in a scratch home,
// temporary directory and working directory, and each run is classified as
// accepted, a clear error, an unclear error, a trace, a panic or a hang.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// hangDeadline is how long a case may run before it counts as a hang. It is
// generous (the machine is shared); the slowest case is what is reported.
const hangDeadline = 60 * time.Second

// scratch is where a battery case's rungv runs: its own $HOME, $TMPDIR and
// working directory, each empty, so that anything it writes outside the
// cache shows.
type scratch struct {
	home, tmp, cwd string
	// extraEnv is added to the environment of the next runs.
	extraEnv []string
}

func newScratch(t *testing.T) *scratch {
	t.Helper()
	root := t.TempDir()
	s := &scratch{home: filepath.Join(root, "home"), tmp: filepath.Join(root, "tmp"), cwd: filepath.Join(root, "cwd")}
	for _, d := range []string{s.home, s.tmp, s.cwd} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (s *scratch) env() []string {
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		switch k {
		case "HOME", "TMPDIR", "GVX_CACHE", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR":
			continue
		}
		env = append(env, e)
	}
	return append(append(env, "HOME="+s.home, "TMPDIR="+s.tmp), s.extraEnv...)
}

// leftovers lists what a run left in the scratch directories, and empties
// them for the next run.
func (s *scratch) leftovers() []string {
	var bad []string
	for _, d := range []string{s.home, s.tmp, s.cwd} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			bad = append(bad, filepath.Join(d, e.Name()))
			os.RemoveAll(filepath.Join(d, e.Name()))
		}
	}
	return bad
}

// runResult is one run of rungv.
type runResult struct {
	stdout, stderr string
	code           int
	hung           bool
	took           time.Duration
}

// run runs rungv with args in s, killing it at hangDeadline.
func (s *scratch) run(args ...string) runResult {
	r, err := runRungv(s.env(), s.cwd, args...)
	if err != nil {
		r.code = -1
		r.stderr += "\n(starting rungv: " + err.Error() + ")"
	}
	return r
}

// runRungv runs rungv with args, in env and dir (nil and "": this
// process's), killing it at hangDeadline. The error is set only when rungv
// could not be started.
func runRungv(env []string, dir string, args ...string) (runResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), hangDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, rungvBinary, args...)
	cmd.Env, cmd.Dir = env, dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := runResult{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start), hung: ctx.Err() != nil}
	if cmd.ProcessState != nil {
		r.code = cmd.ProcessState.ExitCode()
		return r, nil
	}
	if r.hung {
		return r, nil
	}
	return r, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// onHost runs a host command that must succeed.
func onHost(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}
