package dockeraccept

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestExampleGoldenDocker runs examples/golden_docker.sh, the seed workflow
// as a user would run it, and checks what it prints.
func TestExampleGoldenDocker(t *testing.T) {
	requireVolumes(t)
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "examples", "golden_docker.sh")
	cmd := exec.Command("bash", script, t.TempDir())
	cmd.Env = append(os.Environ(), "RUNGV="+env.rungv, "DOCKER="+env.docker, "DOCKER_CONFIG="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	for _, want := range []string{
		"storage driver: overlay2 on extfs",
		": clean",
		"hello from episode 1",
		"hello from episode 2",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the example's output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(string(out), "containers before: 0"); n != 2 {
		t.Errorf("%d of 2 episodes started without containers:\n%s", n, out)
	}
}
