package sentry

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/lockdown"
)

// TestInsideUnprivilegedDocker runs the core cases inside what a
// Kubernetes pod gives: a host `docker run --user 65534 --network none`
// container with Docker's default seccomp profile and no added
// capabilities. The test binary is static, so any local image will do; it
// is chosen by GVX_TEST_DOCKER_IMAGE or is the first local image (nothing
// is pulled).
func TestInsideUnprivilegedDocker(t *testing.T) {
	if os.Getenv(hostileEnv) != "" || os.Getenv("GVX_IN_DOCKER") != "" {
		t.Skip("already inside the harness or a container")
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker CLI on this host")
	}
	image := os.Getenv("GVX_TEST_DOCKER_IMAGE")
	if image == "" {
		out, err := exec.Command(docker, "images", "-q").Output()
		if err != nil {
			t.Skipf("docker is not usable here: %v", err)
		}
		ids := strings.Fields(string(out))
		if len(ids) == 0 {
			t.Skip("no local docker image to run the test binary in (set GVX_TEST_DOCKER_IMAGE)")
		}
		image = ids[0]
	}
	dir, err := tempDir("docker")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	self, _ := os.Executable()
	for src, dst := range map[string]string{self: "sentry.test", imagePath: "busybox.erofs"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	core := "^(TestContainerEnvironment|TestEcho|TestExitCodes|TestEnvCwdUser|TestStdinPipe|TestExecParallel|TestDevices|TestMountableInside|TestFiles|TestIsolation.*|TestPidsLimit|TestForkBomb|TestMemoryLimitKillsHog|TestLockedSandbox|TestKill9LeavesNothing|TestTTY|TestStartIdle)$"
	cmd := exec.Command(docker, "run", "--rm", "--user", "65534:65534", "--network", "none",
		"--tmpfs", "/tmp:exec,mode=1777", "-v", dir+":/t:ro",
		"-e", imageEnv+"=/t/busybox.erofs", "-e", "GVX_IN_DOCKER=1", "--entrypoint", "/t/sentry.test",
		image, "-test.v", "-test.count=1", "-test.timeout=10m", "-test.run", core)
	out, err := cmd.CombinedOutput()
	log := string(out)
	if err != nil {
		t.Fatalf("suite inside docker failed: %v\n%s", err, log)
	}
	for _, name := range []string{"TestContainerEnvironment", "TestEcho", "TestExecParallel", "TestIsolationHostFilesUnreachable", "TestForkBomb", "TestMemoryLimitKillsHog", "TestLockedSandbox", "TestTTY"} {
		if !regexp.MustCompile(`(?m)^--- PASS: ` + name + ` `).MatchString(log) {
			t.Errorf("%s did not pass inside docker:\n%s", name, log)
		}
	}
}

// TestContainerEnvironment checks, inside the container, that it is the
// unprivileged, seccomp-filtered environment the test claims.
func TestContainerEnvironment(t *testing.T) {
	if os.Getenv("GVX_IN_DOCKER") == "" {
		t.Skip("only meaningful inside the container (see TestInsideUnprivilegedDocker)")
	}
	st, err := lockdown.ReadStatus(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != nobody || st.Seccomp != 2 || st.CapEff != 0 || st.CapPrm != 0 {
		t.Fatalf("uid %d, status %+v: want uid 65534 under Docker's seccomp profile with no capabilities", os.Getuid(), st)
	}
}
