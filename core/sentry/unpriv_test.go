package sentry

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/lockdown"
)

// nobody is the uid and gid the unprivileged run drops to.
const nobody = 65534

// TestUnprivileged re-runs the whole suite as uid 65534 with no
// capabilities under a hostile harness: NO_NEW_PRIVS and a seccomp filter
// that makes namespaces and mounts impossible.
func TestUnprivileged(t *testing.T) {
	if os.Getenv(hostileEnv) != "" {
		t.Skip("already running under the hostile harness")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root to drop to uid 65534; this run is already unprivileged")
	}
	// The test binary must be reachable by nobody.
	dir, err := tempDir("unpriv")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sentry.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.v", "-test.count=1", "-test.timeout=10m")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), helperEnv+"=harness", imageEnv+"="+imagePath, "TMPDIR=/tmp")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}},
	}
	out, err := cmd.CombinedOutput()
	log := string(out)
	if err != nil {
		t.Fatalf("suite under the hostile harness failed: %v\n%s", err, log)
	}
	// The cases that matter must have run, not been skipped.
	for _, name := range []string{
		"TestHostileEnvironment", "TestEcho", "TestExitCodes", "TestEnvCwdUser", "TestStdinPipe",
		"TestExecParallel", "TestDevices", "TestMountableInside", "TestFiles",
		"TestIsolationHostProcessesInvisible", "TestIsolationHostFilesUnreachable", "TestIsolationWritesStayInside",
		"TestPidsLimit", "TestForkBomb", "TestMemoryLimitKillsHog", "TestLockedSandbox", "TestKill9LeavesNothing",
		"TestTTY", "TestStartIdle", "TestShutdownDeadlineKills",
	} {
		if !regexp.MustCompile(`(?m)^--- PASS: ` + name + ` `).MatchString(log) {
			t.Errorf("%s did not pass under the hostile harness", name)
		}
	}
	if t.Failed() {
		t.Log(log)
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "locked helper:") || strings.Contains(l, "exec `true` round trip") || strings.Contains(l, "first guest output") {
			t.Log("unprivileged:", strings.TrimSpace(l))
		}
	}
}

// TestHostileEnvironment checks, under the harness, that the harness took
// effect: the suite really ran unprivileged and namespaces were impossible.
func TestHostileEnvironment(t *testing.T) {
	if os.Getenv(hostileEnv) == "" {
		t.Skip("only meaningful under the hostile harness (see TestUnprivileged)")
	}
	if os.Getuid() != nobody || os.Geteuid() != nobody {
		t.Errorf("uid %d euid %d, want %d", os.Getuid(), os.Geteuid(), nobody)
	}
	st, err := lockdown.ReadStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !st.NoNewPrivs || st.Seccomp != 2 || st.CapEff != 0 || st.CapPrm != 0 {
		t.Errorf("status %+v, want NO_NEW_PRIVS, a seccomp filter and no capabilities", st)
	}
	if err := unix.Unshare(unix.CLONE_NEWUSER); err != unix.EPERM {
		t.Errorf("unshare(CLONE_NEWUSER): %v, want EPERM", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != unix.EPERM {
		t.Errorf("unshare(CLONE_NEWNS): %v, want EPERM", err)
	}
	if err := unix.Mount("none", "/tmp", "tmpfs", 0, ""); err != unix.EPERM {
		t.Errorf("mount: %v, want EPERM", err)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0); errno != unix.ENOSYS {
		t.Errorf("clone3: %v, want ENOSYS", errno)
	}
	// fork with CLONE_NEWUSER fails; a plain child still works.
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	if err := cmd.Run(); err == nil {
		t.Error("a child in a new user namespace started")
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("plain child: %v", err)
	}
}
