package dockeraccept

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The seed workflow: one seed sandbox per test run loads the test images
// into a new golden volume at /var/lib/docker and stops; every episode
// runs on a clone of the golden.
var seed struct {
	once   sync.Once
	golden string
	err    error
	box    *box // while the seed runs
	// loaded is what `docker images` listed in the seed.
	loaded string
}

// seedImages are the images the seed loads; every episode has them.
var seedImages = []string{"busybox:latest", "gvx.test/default:latest", "gvx.test/layered:latest"}

// golden returns the golden volume, making it on first use.
//
// Preconditions: requireVolumes(t).
func golden(t testing.TB) string {
	t.Helper()
	seed.once.Do(func() { seed.err = makeGolden() })
	if seed.err != nil {
		t.Fatalf("seed: %v", seed.err)
	}
	return seed.golden
}

// makeGolden runs the seed sandbox: a new volume, the images loaded
// through the published socket with the host's docker CLI, a graceful
// stop, and checks that the volume is clean.
func makeGolden() error {
	path := filepath.Join(env.tmp, "golden.ext4")
	b, err := launchBox(boxOptions{volume: path})
	if err != nil {
		return err
	}
	seed.box = b
	if err := b.waitReady(90 * time.Second); err != nil {
		return err
	}
	for _, archive := range []string{env.busyboxArchive, env.layeredArchive} {
		if out, errOut, err := b.tryDocker("load", "-q", "-i", archive); err != nil {
			return fmt.Errorf("docker load -i %s: %v\n%s%s", archive, err, out, errOut)
		}
	}
	out, errOut, err := b.tryDocker("images", "--format", "{{.Repository}}:{{.Tag}}")
	if err != nil {
		return fmt.Errorf("docker images: %v\n%s", err, errOut)
	}
	for _, img := range seedImages {
		if !strings.Contains(out, img) {
			return fmt.Errorf("the seed's dockerd lists %q after docker load, without %s", out, img)
		}
	}
	seed.loaded = out
	if err := b.stop(60 * time.Second); err != nil {
		return fmt.Errorf("stopping the seed with SIGINT: %v\n%s", err, logTail(b.log.String(), 30))
	}
	os.RemoveAll(b.dir)
	seed.box = nil
	if err := checkImage(path); err != nil {
		return fmt.Errorf("the golden volume after the seed stopped: %w", err)
	}
	seed.golden = path
	return nil
}

// stopSeed kills a seed left running by a failure.
func stopSeed() {
	if seed.box != nil {
		seed.box.kill()
	}
}

// checkVolume checks that a stopped sandbox's volume is clean with `rungv
// volume check` (a clone, a copy-on-write delta, can only be checked so).
func checkVolume(path string) error {
	if out, err := exec.Command(env.rungv, "volume", "check", path).CombinedOutput(); err != nil {
		return fmt.Errorf("rungv volume check %s: %v\n%s", path, err, out)
	}
	return nil
}

// checkImage checks a standalone volume image: checkVolume, and e2fsck -fn
// where installed (it exits 0 even when a journal needs recovery, so its
// output is read too).
func checkImage(path string) error {
	if err := checkVolume(path); err != nil {
		return err
	}
	e2fsck, err := exec.LookPath("e2fsck")
	if err != nil {
		return nil
	}
	out, err := exec.Command(e2fsck, "-fn", path).CombinedOutput()
	if err != nil || strings.Contains(string(out), "Fix?") || strings.Contains(string(out), "WARNING") ||
		strings.Contains(string(out), "recovery") {
		return fmt.Errorf("e2fsck -fn %s: %v\n%s", path, err, out)
	}
	return nil
}

// cloneGolden makes an episode's volume from the golden with `rungv volume
// clone`.
func cloneGolden(t testing.TB) string {
	t.Helper()
	g := golden(t)
	ep := filepath.Join(t.TempDir(), "episode.ext4")
	if out, err := exec.Command(env.rungv, "volume", "clone", g, ep).CombinedOutput(); err != nil {
		t.Fatalf("rungv volume clone: %v\n%s", err, out)
	}
	return ep
}

// newEpisode starts a sandbox on a clone of the golden volume, whose
// dockerd has the seed's images at once. Without volume support in rungv
// it falls back to a tmpfs data root and loads the images itself, saying
// so.
func newEpisode(t *testing.T, flags ...string) *box {
	t.Helper()
	requireSuite(t)
	if !env.volumes {
		t.Log("rungv has no volumes yet: this episode loads the images into a tmpfs /var/lib/docker instead of cloning the golden volume")
		b := startBox(t, boxOptions{flags: flags})
		for _, archive := range []string{env.busyboxArchive, env.layeredArchive} {
			b.docker(t, "load", "-q", "-i", archive)
		}
		return b
	}
	return startBox(t, boxOptions{volume: cloneGolden(t), flags: flags})
}
