package main

// Helpers the package's tests share: test image, cache, running rungv.

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

	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/spec"
)

func testImage(t *testing.T) string {
	t.Helper()
	b, err := testimage.Build()
	if err != nil {
		t.Fatal(err)
	}
	return b.LayoutRef()
}

func sharedCache(t *testing.T) string {
	t.Helper()
	return filepath.Join(os.TempDir(), "rungv-cli-test-cache")
}

// runCLI runs rungv with stdin and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(rungvBinary, append([]string{"--cache", sharedCache(t)}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
		if st := ee.Sys().(syscall.WaitStatus); st.Signaled() {
			code = 128 + int(st.Signal())
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// startControlled starts `rungv run -q --keep-alive --control unix:SOCK
// ARGS...` and dials its control socket. The caller kills or stops cmd.
func startControlled(t *testing.T, sock string, args ...string) (*exec.Cmd, *bytes.Buffer, *control.Client) {
	t.Helper()
	cmd := exec.Command(rungvBinary, append([]string{"--cache", sharedCache(t), "run", "-q", "--keep-alive", "--control", "unix:" + sock}, args...)...)
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var c *control.Client
	err := eventually.Wait(60*time.Second, "rungv's control socket answering", func() (bool, error) {
		var err error
		c, err = control.Dial(context.Background(), "unix:"+sock)
		return err == nil, err
	})
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("%v (rungv's stderr: %s)", err, stderr.String())
	}
	return cmd, stderr, c
}

// waitRemoved waits, with a deadline, for the janitor to remove path once
// rungv has exited.
func waitRemoved(t *testing.T, path, what string) {
	t.Helper()
	eventually.Within(t, 10*time.Second, what+" removed after rungv exited", func() (bool, error) {
		_, err := os.Lstat(path)
		return os.IsNotExist(err), err
	})
}

// parseRun parses a rungv run command line as newRunCommand does and
// returns the spec its flags and arguments build.
func parseRun(t *testing.T, args ...string) (spec.Sandbox, flagNames, error) {
	t.Helper()
	var sf sandboxFlags
	var o runOptions
	sandbox := pflag.NewFlagSet("sandbox", pflag.ContinueOnError)
	sf.register(sandbox)
	fl := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fl.SetInterspersed(false)
	fl.AddFlagSet(sandbox)
	o.register(fl)
	if err := fl.Parse(args); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return sf.toSpec(sandbox, fl.Args())
}

// cliError is the error rungv run reports for a command line before it
// pulls or boots anything: the flags' own, or the spec's checks' restated
// with the flags.
func cliError(t *testing.T, args ...string) error {
	t.Helper()
	sp, names, err := parseRun(t, args...)
	if err != nil {
		return err
	}
	_, _, err = planSandbox(&sp, nil)
	return names.explain(err)
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
