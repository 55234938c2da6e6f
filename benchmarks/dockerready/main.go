// Command dockerready measures Docker inside gvx: sandbox start until
// `docker info` answers (overlay2, the seed's images present) on a clone of
// a golden volume, a start → run → exit episode on a clone, and a start →
// load → run → exit cycle on tmpfs, side by side with `runsc do` running
// the same image's dockerd on tmpfs as root on the same machine.
//
//	go run ./benchmarks/dockerready -rungv build/rungv \
//	    -image "$(go run ./core/internal/dockerimage/mkdockerimage -q)" \
//	    -archive busybox.tar -archive-image gvx.test/default:latest \
//	    [-runsc PATH] [-n 20]
//
// gvx is timed from the host: rungv's start until the published socket
// answers. runsc has no socket on the host (its unix sockets live in the
// sandbox), so a script inside polls `docker version` and prints marks
// that are timed as they reach the host. Figures go to stdout as markdown;
// nothing here is a test.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"z.gfire.dev/gvx/benchmarks/internal/benchfmt"
)

var (
	rungv        = flag.String("rungv", "build/rungv", "rungv binary")
	image        = flag.String("image", "", "the Docker image's gvx reference (make docker-image prints it)")
	archive      = flag.String("archive", "", "a `docker save` tarball loaded into the golden volume")
	archiveImage = flag.String("archive-image", "gvx.test/default:latest", "the image in -archive that episodes run")
	docker       = flag.String("docker", "docker", "the docker CLI")
	runsc        = flag.String("runsc", "", "runsc built from gVisor's pinned version (optional; needs root)")
	n            = flag.Int("n", 20, "runs per measurement")
	cpuset       = flag.String("cpuset", "", "pin each sandbox to these host CPUs (rungv --cpuset-cpus), e.g. 1")
	work         = flag.String("work", "", "scratch directory (default: a temporary one)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dockerready:", err)
		os.Exit(1)
	}
}

func run() error {
	if *image == "" || *archive == "" {
		return errors.New("-image and -archive are required")
	}
	for _, p := range []*string{rungv, archive, runsc} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	dir := *work
	if dir == "" {
		d, err := os.MkdirTemp("", "gvx-dockerready-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if out, err := exec.Command(*rungv, "pull", "-q", *image).CombinedOutput(); err != nil {
		return fmt.Errorf("rungv pull %s: %v\n%s", *image, err, out)
	}

	fmt.Printf("%d runs each; %d CPUs; load average %s\n\n", *n, runtime.NumCPU(), benchfmt.LoadAvg())
	golden := filepath.Join(dir, "golden.ext4")
	seedStart := time.Now()
	if err := seed(dir, golden); err != nil {
		return err
	}
	fmt.Printf("seed (new volume, start, docker load, SIGINT, write back): %s\n\n", ms(time.Since(seedStart)))

	fmt.Println("| what | p50 | p99 | min | max |")
	fmt.Println("|---|---|---|---|---|")
	var ready, episode, cycle []time.Duration
	for i := 0; i < *n; i++ {
		r, e, err := gvxEpisode(dir, golden)
		if err != nil {
			return fmt.Errorf("gvx episode %d: %w", i, err)
		}
		ready, episode = append(ready, r), append(episode, e)
	}
	row("gvx: start → `docker info` OK (clone of the golden: overlay2 on ext4, images present)", ready)
	row("gvx: start → `docker run --rm IMAGE true` → exit (clone of the golden)", episode)

	snap, snapVol, took, err := snapshotReady(dir, golden)
	if err != nil {
		return err
	}
	var rready, repisode []time.Duration
	for i := 0; i < *n; i++ {
		r, e, err := gvxEpisode(dir, snapVol, "--restore", snap)
		if err != nil {
			return fmt.Errorf("gvx restored episode %d: %w", i, err)
		}
		rready, repisode = append(rready, r), append(repisode, e)
	}
	row("gvx: `run --restore` of a ready dockerd's snapshot → `docker info` OK (clone of its volume)", rready)
	row("gvx: `run --restore` → `docker run --rm IMAGE true` → exit", repisode)
	fmt.Printf("| (the snapshot: %s; checkpoint --stop took %s) | | | | |\n", mib(snap), ms(took))
	for i := 0; i < *n; i++ {
		c, err := gvxTmpfsCycle(dir)
		if err != nil {
			return fmt.Errorf("gvx tmpfs cycle %d: %w", i, err)
		}
		cycle = append(cycle, c)
	}
	row("gvx: start → `docker load` → `docker run --rm` → exit (tmpfs data root)", cycle)

	switch {
	case *runsc == "":
		fmt.Println("| runsc do | (skipped: no -runsc) | | | |")
	case os.Geteuid() != 0:
		fmt.Println("| runsc do | (skipped: runsc do needs root) | | | |")
	default:
		var rready, rcycle []time.Duration
		for i := 0; i < *n; i++ {
			r, c, err := runscCycle(dir)
			if err != nil {
				return fmt.Errorf("runsc do %d: %w", i, err)
			}
			rready, rcycle = append(rready, r), append(rcycle, c)
		}
		row("runsc do (root, tmpfs data root): start → `docker version` OK inside", rready)
		row("runsc do (root, tmpfs data root): start → `docker load` → `docker run --rm` → exit", rcycle)
	}
	return nil
}

// sandbox is a running rungv with dockerd.
type sandbox struct {
	cmd  *exec.Cmd
	sock string
	done chan error
	log  *os.File
}

// start starts rungv with the Docker image; volume may be empty (tmpfs).
// extra are more `rungv run` flags.
func start(dir, name, volume string, extra ...string) (*sandbox, error) {
	sock := filepath.Join(dir, name+".sock")
	os.Remove(sock)
	args := []string{"run", "-q", "--nftables", "--net-raw", "-p", "unix:" + sock + ":2375"}
	if volume != "" {
		args = append(args, "--mount", "type=volume,src="+volume+",dst=/var/lib/docker")
	}
	args = append(args, extra...)
	if *cpuset != "" {
		args = append(args, "--cpuset-cpus", *cpuset)
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(*rungv, append(args, *image)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	s := &sandbox{cmd: cmd, sock: sock, done: make(chan error, 1), log: log}
	go func() { s.done <- cmd.Wait() }()
	return s, nil
}

// client speaks HTTP to dockerd over the published socket.
func (s *sandbox) client() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", s.sock)
		},
	}}
}

// waitInfo polls until GET /info answers with overlay2 and at least
// minImages images.
func (s *sandbox) waitInfo(minImages int) error {
	c := s.client()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			return fmt.Errorf("rungv exited: %v (log %s)", err, s.log.Name())
		default:
		}
		resp, err := c.Get("http://docker/info")
		if err == nil {
			var info struct {
				Driver string
				Images int
			}
			err = json.NewDecoder(resp.Body).Decode(&info)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK {
				if info.Driver != "overlay2" || info.Images < minImages {
					return fmt.Errorf("docker info: driver %q, %d images", info.Driver, info.Images)
				}
				return nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return errors.New("dockerd did not answer within 2 minutes")
}

// docker runs the docker CLI against the sandbox.
func (s *sandbox) docker(args ...string) error {
	cmd := exec.Command(*docker, args...)
	cmd.Env = append(os.Environ(), "DOCKER_HOST=unix://"+s.sock, "DOCKER_CLI_HINTS=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// stop sends SIGINT and waits for rungv to exit cleanly.
func (s *sandbox) stop() error {
	defer s.log.Close()
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-s.done:
		if err != nil {
			return fmt.Errorf("rungv after SIGINT: %v (log %s)", err, s.log.Name())
		}
		return nil
	case <-time.After(time.Minute):
		s.cmd.Process.Kill()
		return errors.New("rungv did not exit within a minute of SIGINT")
	}
}

// seed makes the golden volume: the archive loaded, the sandbox stopped.
func seed(dir, golden string) error {
	if out, err := exec.Command(*rungv, "volume", "create", golden).CombinedOutput(); err != nil {
		return fmt.Errorf("rungv volume create: %v\n%s", err, out)
	}
	s, err := start(dir, "seed", golden)
	if err != nil {
		return err
	}
	if err := s.waitInfo(0); err != nil {
		return err
	}
	if err := s.docker("load", "-q", "-i", *archive); err != nil {
		return err
	}
	if err := s.stop(); err != nil {
		return err
	}
	// As gvx.docker.golden does: without dockerd's network database, an
	// episode's dockerd skips taking down the seed's bridge network.
	rm := exec.Command(*rungv, "run", "-q", "--entrypoint", "rm", "--mount", "type=volume,src="+golden+",dst=/var/lib/docker",
		*image, "-f", "/var/lib/docker/network/files/local-kv.db")
	if out, err := rm.CombinedOutput(); err != nil {
		return fmt.Errorf("removing dockerd's network database from the golden: %v\n%s", err, out)
	}
	return nil
}

// gvxEpisode starts rungv (with extra flags, such as --restore) on a clone
// of vol and returns start → info OK and start → run → exit.
func gvxEpisode(dir, vol string, extra ...string) (time.Duration, time.Duration, error) {
	ep := filepath.Join(dir, "episode.ext4")
	os.Remove(ep)
	if out, err := exec.Command(*rungv, "volume", "clone", vol, ep).CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("rungv volume clone: %v\n%s", err, out)
	}
	t0 := time.Now()
	s, err := start(dir, "episode", ep, extra...)
	if err != nil {
		return 0, 0, err
	}
	if err := s.waitInfo(1); err != nil {
		s.cmd.Process.Kill()
		return 0, 0, err
	}
	ready := time.Since(t0)
	if err := s.docker("run", "--rm", *archiveImage, "true"); err != nil {
		s.cmd.Process.Kill()
		return 0, 0, err
	}
	if err := s.stop(); err != nil {
		return 0, 0, err
	}
	return ready, time.Since(t0), nil
}

// snapshotReady starts dockerd on a clone of the golden, checkpoints it
// once ready (stopping it) and flattens its volume: the snapshot and the
// volume episodes restore it on.
func snapshotReady(dir, golden string) (snap, vol string, took time.Duration, err error) {
	ep := filepath.Join(dir, "ready-clone.ext4")
	if out, err := exec.Command(*rungv, "volume", "clone", golden, ep).CombinedOutput(); err != nil {
		return "", "", 0, fmt.Errorf("rungv volume clone: %v\n%s", err, out)
	}
	ctl := filepath.Join(dir, "ready.ctl")
	os.Remove(ctl)
	s, err := start(dir, "ready", ep, "--control", "unix:"+ctl)
	if err != nil {
		return "", "", 0, err
	}
	if err := s.waitInfo(1); err != nil {
		s.cmd.Process.Kill()
		return "", "", 0, err
	}
	snap = filepath.Join(dir, "ready.snap")
	t0 := time.Now()
	if out, err := exec.Command(*rungv, "checkpoint", "--control", "unix:"+ctl, "--stop", "-o", snap).CombinedOutput(); err != nil {
		s.cmd.Process.Kill()
		return "", "", 0, fmt.Errorf("rungv checkpoint: %v\n%s", err, out)
	}
	took = time.Since(t0)
	if err := <-s.done; err != nil {
		return "", "", 0, fmt.Errorf("rungv after checkpoint --stop: %v (log %s)", err, s.log.Name())
	}
	s.log.Close()
	vol = filepath.Join(dir, "ready.ext4")
	if out, err := exec.Command(*rungv, "volume", "flatten", ep, vol).CombinedOutput(); err != nil {
		return "", "", 0, fmt.Errorf("rungv volume flatten: %v\n%s", err, out)
	}
	return snap, vol, took, nil
}

func mib(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1f MiB", float64(st.Size())/(1<<20))
}

// gvxTmpfsCycle: start with a tmpfs data root, load, run, exit.
func gvxTmpfsCycle(dir string) (time.Duration, error) {
	t0 := time.Now()
	s, err := start(dir, "tmpfs", "")
	if err != nil {
		return 0, err
	}
	for _, step := range [][]string{{"load", "-q", "-i", *archive}, {"run", "--rm", *archiveImage, "true"}} {
		if step[0] == "load" {
			if err := s.waitInfo(0); err != nil {
				s.cmd.Process.Kill()
				return 0, err
			}
		}
		if err := s.docker(step...); err != nil {
			s.cmd.Process.Kill()
			return 0, err
		}
	}
	if err := s.stop(); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// runscScript runs inside `runsc do`: the image's entrypoint in the
// background, marks as dockerd answers and as the cycle ends.
const runscScript = `/usr/local/sbin/gvx-dockerd >/tmp/dockerd.log 2>&1 &
until docker version >/dev/null 2>&1; do sleep 0.005; done
echo READY
docker load -q -i /archive.tar >/dev/null
docker run --rm "$1" true
kill -INT "$(cat /var/run/docker.pid)"
wait
echo DONE`

// runscCycle runs the same image's dockerd under `runsc do` (its EROFS
// root, --TESTONLY-nftables, --net-raw, no network) and returns start →
// READY and start → exit.
func runscCycle(dir string) (time.Duration, time.Duration, error) {
	erofs, err := erofsPath()
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	cmd := exec.Command(*runsc, "--network=none", "--net-raw", "--TESTONLY-nftables",
		"--root", filepath.Join(dir, "runsc-state"),
		"do", "-quiet", "-erofs", erofs, "-volume", *archive+":/archive.tar",
		"--", "/bin/sh", "-c", runscScript, "sh", *archiveImage)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	var ready time.Duration
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if sc.Text() == "READY" {
			ready = time.Since(t0)
		}
	}
	io.Copy(io.Discard, stdout)
	if err := cmd.Wait(); err != nil || ready == 0 {
		return 0, 0, fmt.Errorf("runsc do: %v (ready mark seen: %v)\n%s", err, ready != 0, stderr.String())
	}
	return ready, time.Since(t0), nil
}

// erofsPath finds the Docker image's EROFS file in rungv's cache.
func erofsPath() (string, error) {
	out, err := exec.Command(*rungv, "images", "--format", "json").Output()
	if err != nil {
		return "", fmt.Errorf("rungv images: %w", err)
	}
	var imgs []struct {
		Refs  []string `json:"refs"`
		Erofs string   `json:"erofs"`
	}
	if err := json.Unmarshal(out, &imgs); err != nil {
		return "", err
	}
	for _, im := range imgs {
		for _, r := range im.Refs {
			if r == *image {
				return im.Erofs, nil
			}
		}
	}
	return "", fmt.Errorf("%s is not in rungv's cache", *image)
}

func row(what string, ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	fmt.Printf("| %s | %s | %s | %s | %s |\n", what, ms(benchfmt.Percentile(ds, 50)), ms(benchfmt.Percentile(ds, 99)), ms(ds[0]), ms(ds[len(ds)-1]))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
