package dockeraccept

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/spec"
)

// box is a rungv sandbox running the Docker image's dockerd.
type box struct {
	dir     string // holds the sockets
	sock    string // dockerd's API, published by rungv (-p unix:sock:2375)
	control string // rungv's control socket
	cmd     *exec.Cmd
	log     *syncBuffer // rungv's stdout and stderr: dockerd's log
	done    chan struct{}
	err     error // the rungv process's exit, after done
}

// boxOptions are a box's rungv flags beyond the ones every box has.
type boxOptions struct {
	// volume is an ext4 volume mounted at /var/lib/docker; empty means
	// the image's entrypoint puts a tmpfs there.
	volume string
	// flags are more `rungv run` flags (published ports).
	flags []string
	// restore, if set, is a snapshot the box continues (run --restore)
	// instead of starting dockerd.
	restore string
}

// startBox starts a sandbox and waits until dockerd answers. It is
// stopped (SIGINT, then SIGKILL) when t ends unless stopped before.
//
// Preconditions: requireSuite(t).
func startBox(t testing.TB, opts boxOptions) *box {
	t.Helper()
	b, err := launchBox(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.kill() })
	if err := b.waitReady(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	return b
}

// launchBox starts rungv without waiting for dockerd.
func launchBox(opts boxOptions) (*box, error) {
	// Socket paths must stay under 108 bytes: a short directory.
	dir, err := os.MkdirTemp("", "gvxd-")
	if err != nil {
		return nil, err
	}
	b := &box{
		dir:     dir,
		sock:    filepath.Join(dir, "docker.sock"),
		control: filepath.Join(dir, "ctl.sock"),
		log:     &syncBuffer{},
		done:    make(chan struct{}),
	}
	args := []string{"--cache", env.cache, "run", "-q", "--nftables", "--net-raw",
		"--control", "unix:" + b.control, "-p", "unix:" + b.sock + ":2375", "--stop-timeout", "30s"}
	if opts.volume != "" {
		args = append(args, "--mount", "type=volume,src="+opts.volume+",dst=/var/lib/docker")
	}
	if opts.restore != "" {
		args = append(args, "--restore", opts.restore)
	}
	args = append(append(args, opts.flags...), env.image)
	b.cmd = exec.Command(env.rungv, args...)
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		b.err = b.cmd.Wait()
		close(b.done)
	}()
	return b, nil
}

// waitReady waits until dockerd answers /_ping on the published socket.
func (b *box) waitReady(timeout time.Duration) error {
	client := b.httpClient()
	err := eventually.Wait(timeout, "dockerd to answer on "+b.sock, func() (bool, error) {
		select {
		case <-b.done:
			return false, eventually.Stop(fmt.Errorf("rungv exited first: %v", b.err))
		default:
		}
		resp, err := client.Get("http://docker/_ping")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("/_ping: %s", resp.Status)
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, logTail(b.log.String(), 30))
	}
	return nil
}

// httpClient talks HTTP over the published docker socket.
func (b *box) httpClient() *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", b.sock)
		}},
	}
}

// docker runs the host docker CLI against the box's dockerd and returns
// its stdout; a failure fails t with stderr and dockerd's log.
func (b *box) docker(t testing.TB, args ...string) string {
	t.Helper()
	out, errOut, err := b.tryDocker(args...)
	if err != nil {
		t.Fatalf("docker %s: %v\nstdout: %s\nstderr: %s\ndockerd log:\n%s", strings.Join(args, " "), err, out, errOut, logTail(b.log.String(), 20))
	}
	return out
}

// tryDocker runs the host docker CLI and returns stdout, stderr and the
// error.
func (b *box) tryDocker(args ...string) (string, string, error) {
	cmd := b.dockerCmd(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// dockerCmd is the host docker CLI talking to the box's dockerd.
func (b *box) dockerCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(env.docker, args...)
	cmd.Env = append(os.Environ(),
		"DOCKER_HOST=unix://"+b.sock,
		// Nothing from the user's docker configuration or plugins; the
		// classic builder whatever the host CLI prefers.
		"DOCKER_CONFIG="+filepath.Join(b.dir, "docker-config"),
		"DOCKER_CONTEXT=", "DOCKER_BUILDKIT=0", "DOCKER_CLI_HINTS=false")
	return cmd
}

// exec runs argv inside the sandbox (not in a container), as an agent's
// shell would, and returns its combined output and exit code.
func (b *box) exec(t testing.TB, cwd string, argv ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := control.Dial(ctx, "unix:"+b.control)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out syncBuffer
	res, err := c.Exec(ctx, control.ExecRequest{Exec: spec.Exec{Argv: argv, Cwd: cwd}}, control.ExecIO{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("exec %q in the sandbox: %v", argv, err)
	}
	return out.String(), res.ExitCode
}

// writeFile writes a file inside the sandbox, making its directory.
func (b *box) writeFile(t testing.TB, path, content string) {
	t.Helper()
	if out, code := b.exec(t, "", "mkdir", "-p", filepath.Dir(path)); code != 0 {
		t.Fatalf("mkdir -p %s in the sandbox: exit %d %s", filepath.Dir(path), code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := control.Dial(ctx, "unix:"+b.control)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WriteFile(ctx, control.WriteFileRequest{Path: path, Mode: 0o644}, strings.NewReader(content)); err != nil {
		t.Fatalf("writing %s in the sandbox: %v", path, err)
	}
}

// stop stops the sandbox as a user would with ^C (SIGINT: dockerd shuts
// down, rungv writes the volume back) and returns rungv's exit error.
func (b *box) stop(timeout time.Duration) error {
	select {
	case <-b.done:
		return b.err
	default:
	}
	b.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-b.done:
		return b.err
	case <-time.After(timeout):
		b.kill()
		return fmt.Errorf("rungv did not exit within %v of SIGINT; killed", timeout)
	}
}

// kill ends rungv at once and removes the socket directory.
func (b *box) kill() {
	select {
	case <-b.done:
	default:
		b.cmd.Process.Kill()
		<-b.done
	}
	os.RemoveAll(b.dir)
}

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
