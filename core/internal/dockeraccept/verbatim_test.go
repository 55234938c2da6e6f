package dockeraccept

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/internal/testregistry"
)

// seedCommand is the seed's command word for word as the gvx post gives
// it, run in dir, where golden.ext4 is:
//
//	rungv run -p unix:SOCK:2375 --mount type=volume,src=golden.ext4,dst=/var/lib/docker -e DOCKER_TLS_CERTDIR= IMAGE --tls=false
//
// The suite's image cache comes from $GVX_CACHE, not a flag.
func seedCommand(ctx context.Context, dir, image string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, env.rungv, "run", "-p", "unix:"+filepath.Join(dir, "docker.sock")+":2375",
		"--mount", "type=volume,src=golden.ext4,dst=/var/lib/docker", "-e", "DOCKER_TLS_CERTDIR=", image, "--tls=false")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GVX_CACHE="+env.cache)
	return cmd
}

// TestSeedVerbatimFromRegistry is a pip user's way to Docker inside gvx:
// the Docker image pulled from a registry (the in-process one, serving
// what `make docker-image` built) and run with the seed's command as
// written. The image's label turns on nftables and raw sockets, saying
// so; the missing golden.ext4 is created, saying so; the host's docker CLI
// loads an image through the published socket and runs a container on
// dockerd's default bridge network. Stopped with SIGINT, the golden
// volume is clean.
func TestSeedVerbatimFromRegistry(t *testing.T) {
	requireVolumes(t)
	ref := testregistry.Serve(t, "127.0.0.1") + "/gvx/docker:latest"
	if err := testregistry.Push(env.built.Layout, ref); err != nil {
		t.Fatalf("pushing the Docker image to %s: %v", ref, err)
	}
	// Socket paths must stay under 108 bytes: a short directory.
	dir, err := os.MkdirTemp("", "gvxv-")
	if err != nil {
		t.Fatal(err)
	}
	b := &box{dir: dir, sock: filepath.Join(dir, "docker.sock"), log: &syncBuffer{}, done: make(chan struct{})}
	b.cmd = seedCommand(context.Background(), dir, ref)
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		b.err = b.cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(b.kill)
	if err := b.waitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"rungv: the image needs --nftables --net-raw (label dev.gfire.gvx.needs=\"nftables,net-raw\"): turned on",
		"rungv: created the volume " + filepath.Join(dir, "golden.ext4") + ", 16 GiB, sparse",
	} {
		if !strings.Contains(b.log.String(), want) {
			t.Errorf("rungv's stderr lacks %q:\n%s", want, logTail(b.log.String(), 30))
		}
	}
	b.docker(t, "load", "-q", "-i", env.busyboxArchive)
	// A container on the default bridge has an address of docker0's
	// 172.17.0.0/16, which dockerd's iptables-nft rules serve.
	out := b.docker(t, "run", "--rm", "busybox:latest", "sh", "-c", "echo hello from a container; ip -4 -o addr show eth0")
	if !strings.Contains(out, "hello from a container") || !strings.Contains(out, "inet 172.17.") {
		t.Errorf("docker run on the default bridge: %q; want its greeting and an address of 172.17.0.0/16", out)
	}
	if err := b.stop(60 * time.Second); err != nil {
		t.Fatalf("stopping the seed with SIGINT: %v\n%s", err, logTail(b.log.String(), 30))
	}
	if err := checkImage(filepath.Join(dir, "golden.ext4")); err != nil {
		t.Error(err)
	}
}

// TestSeedVerbatimPlainDebian is a new user's first try: the seed's
// command as written on a Debian image with docker.io whose entrypoint is
// dockerd and that carries no label of gvx's. It fails at once — before
// the sandbox boots: no line of dockerd's log — naming --nftables
// --net-raw, and leaves no golden.ext4 behind.
func TestSeedVerbatimPlainDebian(t *testing.T) {
	requireVolumes(t)
	ref := plainDebianImage(t)
	if out, err := exec.Command(env.rungv, "--cache", env.cache, "pull", "-q", ref).CombinedOutput(); err != nil {
		t.Fatalf("rungv pull %s: %v\n%s", ref, err, out)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := seedCommand(ctx, dir, ref).CombinedOutput()
	var exit *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("the seed's command on a plain Debian dockerd image: %v (%v)\n%s\nwant rungv to refuse it at once, exit 1", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "rungv: the command runs dockerd") || !strings.Contains(string(out), "add --nftables --net-raw") {
		t.Errorf("rungv's refusal does not name the flags:\n%s", out)
	}
	if strings.Contains(string(out), "level=") {
		t.Errorf("dockerd ran (its log is there); want the start refused before the sandbox boots:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "golden.ext4")); !os.IsNotExist(err) {
		t.Errorf("golden.ext4 after the refused start: %v; want it not created", err)
	}
}

// plainDebianImage writes the Docker image's Debian and Compose layers
// as a new user's image: entrypoint dockerd, no gvx entrypoint script in
// use and no label of gvx's. It returns its reference.
func plainDebianImage(t *testing.T) string {
	t.Helper()
	p, err := layout.FromPath(env.built.Layout)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config
	cfg.Entrypoint, cfg.Labels, cfg.ExposedPorts = []string{"dockerd"}, nil, nil
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := testimage.WriteLayout(img, dir); err != nil {
		t.Fatal(err)
	}
	return "oci:" + dir + ":latest"
}
