package dockeraccept

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"z.gfire.dev/gvx/core/internal/dockerimage"
	"z.gfire.dev/gvx/core/internal/testimage"
)

// env is what every test uses, prepared once by TestMain.
var env struct {
	// skip, if not empty, is why the suite cannot run here.
	skip string
	// rungv is the freshly built binary.
	rungv string
	// cache is rungv's image cache for the suite.
	cache string
	// image is the Docker image's reference, pulled into cache.
	image string
	// built is the Docker image's build.
	built *dockerimage.Built
	// docker is the host docker CLI.
	docker string
	// busyboxArchive is a `docker save` tarball of the one-layer busybox
	// image, tagged busybox:latest and gvx.test/default:latest.
	busyboxArchive string
	// layeredArchive is the three-layer test image (whiteouts, opaque
	// directories, hard links, devices, xattrs), gvx.test/layered:latest.
	layeredArchive string
	// volumes says whether rungv has volumes (--mount, `rungv volume`).
	volumes bool
	// tmp is removed at exit.
	tmp string
}

func TestMain(m *testing.M) {
	code, err := setUp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dockeraccept:", err)
		os.Exit(1)
	}
	if env.skip != "" {
		fmt.Fprintf(os.Stderr, "SKIP Docker acceptance tests: %s\n", env.skip)
	}
	if code == 0 {
		code = m.Run()
	}
	stopSeed()
	os.RemoveAll(env.tmp)
	os.Exit(code)
}

// setUp fills env. A missing prerequisite sets env.skip; an error fails
// the suite.
func setUp() (int, error) {
	var err error
	if env.tmp, err = os.MkdirTemp("", "gvx-dockeraccept-"); err != nil {
		return 1, err
	}
	if os.Getenv("GVX_DOCKER_TESTS") == "0" {
		env.skip = "GVX_DOCKER_TESTS=0"
		return 0, nil
	}
	if env.docker, err = exec.LookPath("docker"); err != nil {
		env.skip = "no docker CLI on this host (the tests drive the inner dockerd with it; no host daemon is used)"
		return 0, nil
	}
	if env.built, env.skip, err = dockerImage(); err != nil || env.skip != "" {
		return 0, err
	}
	// make builds rungv once for the whole test run and names it in
	// GVX_TEST_RUNGV; unset, the tests build their own.
	if env.rungv = os.Getenv("GVX_TEST_RUNGV"); env.rungv == "" {
		env.rungv = filepath.Join(env.tmp, "rungv")
		build := exec.Command("go", "build", "-o", env.rungv, "z.gfire.dev/gvx/core/cmd/rungv")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return 1, fmt.Errorf("building rungv: %v\n%s", err, out)
		}
	}
	// A cache of its own, kept between runs: converting the ~350 MB image
	// to EROFS takes seconds, once.
	env.cache = filepath.Join(os.TempDir(), "gvx-dockeraccept-cache")
	env.image = env.built.Ref()
	pull := exec.Command(env.rungv, "--cache", env.cache, "pull", "-q", env.image)
	if out, err := pull.CombinedOutput(); err != nil {
		return 1, fmt.Errorf("rungv pull %s: %v\n%s", env.image, err, out)
	}
	if err := writeArchives(); err != nil {
		return 1, err
	}
	env.volumes = exec.Command(env.rungv, "volume", "--help").Run() == nil
	return 0, nil
}

// dockerImage returns the cached Docker image, building it when this
// machine can (root, debootstrap). It returns a skip reason when it
// cannot; GVX_DOCKER_TESTS=1 turns that into an error.
func dockerImage() (*dockerimage.Built, string, error) {
	r := dockerimage.Default()
	if b, ok := dockerimage.Cached(r, dockerimage.Options{}); ok {
		return b, "", nil
	}
	forced := os.Getenv("GVX_DOCKER_TESTS") == "1"
	_, lookErr := exec.LookPath("debootstrap")
	if os.Geteuid() != 0 || lookErr != nil {
		reason := "the Docker image is not built: run `make docker-image` as root (it needs debootstrap and a Debian mirror)"
		if forced {
			return nil, "", errors.New(reason)
		}
		return nil, reason, nil
	}
	fmt.Fprintln(os.Stderr, "dockeraccept: building the Docker image (once; debootstrap and Compose take minutes) …")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	b, err := dockerimage.Build(ctx, r, dockerimage.Options{Logf: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "dockeraccept: "+format+"\n", args...)
	}})
	if err != nil {
		if forced {
			return nil, "", err
		}
		return nil, fmt.Sprintf("building the Docker image failed: %v", err), nil
	}
	return b, "", nil
}

// writeArchives writes the test images as `docker save` tarballs.
func writeArchives() error {
	busybox, err := os.ReadFile(testimage.BusyboxPath)
	if err != nil {
		return fmt.Errorf("reading %s: %w (apt-get install busybox-static)", testimage.BusyboxPath, err)
	}
	img, err := testimage.Image([][]testimage.Entry{testimage.BaseLayer(busybox)})
	if err != nil {
		return err
	}
	env.busyboxArchive = filepath.Join(env.tmp, "busybox.tar")
	if err := writeArchive(env.busyboxArchive, img, "busybox:latest", testimage.DefaultTag); err != nil {
		return err
	}
	// The test image's layers, less its hard link to a file of a lower
	// layer: Docker unpacks each layer on its own and refuses those, on
	// Linux as here.
	var specs [][]testimage.Entry
	for i, layer := range testimage.Layers(busybox) {
		var keep []testimage.Entry
		for _, e := range layer {
			if e.Type == tar.TypeLink && !inLayer(layer, e.Linkname) {
				continue
			}
			keep = append(keep, e)
		}
		if len(keep) == len(layer) && i == 2 {
			return fmt.Errorf("the test image's top layer no longer has a cross-layer hard link; update writeArchives")
		}
		specs = append(specs, keep)
	}
	layered, err := testimage.Image(specs)
	if err != nil {
		return err
	}
	env.layeredArchive = filepath.Join(env.tmp, "layered.tar")
	if err := writeArchive(env.layeredArchive, layered, "gvx.test/layered:latest"); err != nil {
		return err
	}
	return nil
}

// inLayer reports whether layer has an entry named name.
func inLayer(layer []testimage.Entry, name string) bool {
	for _, e := range layer {
		if e.Name == name {
			return true
		}
	}
	return false
}

func writeArchive(path string, img v1.Image, tags ...string) error {
	refs := make(map[name.Reference]v1.Image)
	for _, tag := range tags {
		t, err := name.NewTag(tag)
		if err != nil {
			return err
		}
		refs[t] = img
	}
	return tarball.MultiRefWriteToFile(path, refs)
}

// requireSuite skips t when the suite cannot run here.
func requireSuite(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
}

// requireVolumes skips t when rungv has no volumes yet.
func requireVolumes(t *testing.T) {
	t.Helper()
	requireSuite(t)
	if !env.volumes {
		t.Skip("rungv has no `volume` command yet (the ext4 volume work has not landed): the golden-volume workflow cannot run")
	}
}

// logTail returns the last lines of s.
func logTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
