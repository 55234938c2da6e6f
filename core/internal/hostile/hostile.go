// Package hostile recreates, for tests, the host a sandbox gets inside an
// ordinary container or Kubernetes pod: no capabilities, NO_NEW_PRIVS, and
// a seccomp filter under which user namespaces and mounts are impossible.
//
// A test re-runs its own binary as uid 65534 with Rerun; the child calls
// Harness from TestMain, which installs the filter and re-executes the test
// binary under it, so every sandbox the suite starts inherits it.
package hostile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/seccomp"
)

// Nobody is the uid and gid a hostile run drops to.
const Nobody = 65534

const (
	// harnessEnv asks TestMain to become the harness.
	harnessEnv = "GVX_HOSTILE_HARNESS"
	// activeEnv marks a test binary running under the harness.
	activeEnv = "GVX_HOSTILE"
)

// Active reports whether this process runs under the hostile harness.
func Active() bool { return os.Getenv(activeEnv) != "" }

// Harness is called first thing from TestMain. In a child started by
// Rerun it installs the filter and replaces the process with the test
// binary under it; it does not return then. Otherwise it does nothing.
func Harness() {
	if os.Getenv(harnessEnv) == "" {
		return
	}
	if err := InstallFilter(); err != nil {
		fmt.Fprintln(os.Stderr, "hostile harness:", err)
		os.Exit(2)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile harness:", err)
		os.Exit(2)
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, harnessEnv+"=") {
			env = append(env, e)
		}
	}
	env = append(env, activeEnv+"=1")
	err = syscall.Exec(self, append([]string{self}, os.Args[1:]...), env)
	fmt.Fprintln(os.Stderr, "hostile harness: exec:", err)
	os.Exit(2)
}

// InstallFilter sets NO_NEW_PRIVS and installs the filter a locked-down
// container host imposes: EPERM for unshare, setns, mount and clone with
// any CLONE_NEW* flag, ENOSYS for clone3.
func InstallFilter() error {
	newFlags := []uintptr{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET}
	var cloneNew seccomp.Or
	for _, f := range newFlags {
		cloneNew = append(cloneNew, seccomp.PerArg{seccomp.MaskedEqual(f, f)})
	}
	eperm := seccomp.MakeSyscallRules(map[uintptr]seccomp.SyscallRule{
		unix.SYS_UNSHARE: seccomp.MatchAll{},
		unix.SYS_SETNS:   seccomp.MatchAll{},
		unix.SYS_MOUNT:   seccomp.MatchAll{},
		unix.SYS_CLONE:   cloneNew,
	})
	enosys := seccomp.MakeSyscallRules(map[uintptr]seccomp.SyscallRule{
		unix.SYS_CLONE3: seccomp.MatchAll{},
	})
	prog := &seccomp.Program{
		RuleSets: []seccomp.RuleSet{
			{Rules: eperm, Action: seccomp.ReturnError.Code(uint16(unix.EPERM))},
			{Rules: enosys, Action: seccomp.ReturnError.Code(uint16(unix.ENOSYS))},
		},
		Options: seccomp.ProgramOptions{DefaultAction: seccomp.Allow, BadArchAction: seccomp.KillProcess},
	}
	insns, _, err := prog.Build()
	if err != nil {
		return fmt.Errorf("building the hostile filter: %w", err)
	}
	// SetFilter sets NO_NEW_PRIVS first, as an unprivileged process must.
	if err := seccomp.SetFilter(insns); err != nil {
		return fmt.Errorf("installing the hostile filter: %w", err)
	}
	return nil
}

// Rerun runs a copy of the current test binary, placed in dir (which the
// caller makes readable by uid 65534), as uid 65534 under the harness,
// with extra environment and test flags, and returns its combined output.
// Preconditions: the caller is root.
func Rerun(dir string, env []string, args ...string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(self))
	data, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command(bin, append([]string{"-test.v", "-test.count=1", "-test.timeout=10m"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), harnessEnv+"=1", "TMPDIR=/tmp")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: Nobody, Gid: Nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Passed reports which of names have a "--- PASS" line in a verbose test
// log, and which do not.
func Passed(log string, names ...string) (missing []string) {
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^\s*--- PASS: ` + regexp.QuoteMeta(name) + ` `).MatchString(log) {
			missing = append(missing, name)
		}
	}
	return missing
}
