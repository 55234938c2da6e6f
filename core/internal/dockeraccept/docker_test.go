package dockeraccept

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/eventually"
)

// TestDockerCLI drives one episode's dockerd from the host with the real
// docker CLI, through the unix socket rungv publishes.
func TestDockerCLI(t *testing.T) {
	b := newEpisode(t)

	t.Run("info", func(t *testing.T) {
		var info struct {
			Driver       string
			DriverStatus [][2]string
			CgroupDriver string
			Images       int
		}
		if err := json.Unmarshal([]byte(b.docker(t, "info", "--format", "{{json .}}")), &info); err != nil {
			t.Fatal(err)
		}
		if info.Driver != "overlay2" {
			t.Fatalf("storage driver %q, want overlay2 (never vfs)", info.Driver)
		}
		backing := ""
		for _, kv := range info.DriverStatus {
			if kv[0] == "Backing Filesystem" {
				backing = kv[1]
			}
		}
		want := "extfs" // the ext4 volume
		if !env.volumes {
			want = "tmpfs"
		}
		if backing != want {
			t.Errorf("overlay2's backing filesystem is %q, want %q", backing, want)
		}
		if info.CgroupDriver != "cgroupfs" {
			t.Errorf("cgroup driver %q, want cgroupfs", info.CgroupDriver)
		}
		// iptables on: dockerd programmed its NAT through iptables-nft
		// into the Sentry's nftables.
		out, code := b.exec(t, "", "iptables-save", "-t", "nat")
		if code != 0 {
			t.Fatalf("iptables-save in the sandbox: exit %d\n%s", code, out)
		}
		for _, rule := range []string{":DOCKER ", "-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE", "-j DOCKER"} {
			if !strings.Contains(out, rule) {
				t.Errorf("dockerd's nat table lacks %q:\n%s", rule, out)
			}
		}
	})

	t.Run("images from the golden", func(t *testing.T) {
		out := b.docker(t, "images", "--format", "{{.Repository}}:{{.Tag}}")
		for _, img := range seedImages {
			if !strings.Contains(out, img) {
				t.Errorf("docker images lists %q, without %s", out, img)
			}
		}
	})

	t.Run("run", func(t *testing.T) {
		if out := b.docker(t, "run", "--rm", "busybox", "echo", "hello from a container"); out != "hello from a container\n" {
			t.Errorf("docker run --rm busybox echo: %q", out)
		}
		// The exit status comes back.
		if _, errOut, err := b.tryDocker("run", "--rm", "busybox", "sh", "-c", "exit 7"); err == nil || !strings.Contains(err.Error(), "exit status 7") {
			t.Errorf("docker run ... exit 7: %v, want exit status 7\nstderr: %s\ndockerd log:\n%s", err, errOut, logTail(b.log.String(), 30))
		}
	})

	t.Run("detached logs exec rm", func(t *testing.T) {
		id := strings.TrimSpace(b.docker(t, "run", "-d", "--name", "sleeper", "busybox", "sh", "-c", "echo started; exec sleep 3600"))
		eventually.Within(t, 20*time.Second, "docker logs to show the container's output", func() (bool, error) {
			out := b.docker(t, "logs", id)
			return strings.Contains(out, "started"), fmt.Errorf("logs %q", out)
		})
		if out := b.docker(t, "exec", "sleeper", "sh", "-c", "echo exec ok; cat /proc/1/cmdline | tr '\\0' ' '"); !strings.Contains(out, "exec ok") || !strings.Contains(out, "sleep 3600") {
			t.Errorf("docker exec: %q", out)
		}
		if out := b.docker(t, "ps", "--format", "{{.Names}} {{.Status}}"); !strings.Contains(out, "sleeper Up") {
			t.Errorf("docker ps: %q", out)
		}
		b.docker(t, "rm", "-f", "sleeper")
		if out := b.docker(t, "ps", "-a", "-q"); strings.TrimSpace(out) != "" {
			t.Errorf("containers left after docker rm -f: %q", out)
		}
	})

	t.Run("build", func(t *testing.T) {
		dir := t.TempDir()
		files := map[string]string{
			"Dockerfile": `FROM busybox AS builder
RUN mkdir /out && echo "built in stage one" > /out/built.txt
COPY message.txt /out/
FROM gvx.test/default
COPY --from=builder /out/ /result/
RUN cat /result/built.txt /result/message.txt > /result/all.txt
CMD ["cat", "/result/all.txt"]
`,
			"message.txt": "copied from the context\n",
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		b.docker(t, "build", "-q", "-t", "gvx.test/built:1", dir)
		if out := b.docker(t, "run", "--rm", "gvx.test/built:1"); out != "built in stage one\ncopied from the context\n" {
			t.Errorf("the built image printed %q", out)
		}
	})

	t.Run("privileged mount", func(t *testing.T) {
		script := "mkdir -p /m && mount -t tmpfs -o size=1m gvxtmp /m && echo data > /m/f && cat /m/f && grep -c ' /m tmpfs ' /proc/mounts"
		if out := b.docker(t, "run", "--rm", "--privileged", "busybox", "sh", "-c", script); out != "data\n1\n" {
			t.Errorf("mount inside a --privileged container: %q", out)
		}
		// Without --privileged the same mount is refused.
		if out, _, err := b.tryDocker("run", "--rm", "busybox", "sh", "-c", script); err == nil {
			t.Errorf("an unprivileged container could mount: %q", out)
		}
	})

	t.Run("layered image", func(t *testing.T) {
		// Whiteouts, an opaque directory, a file replacing a directory, a
		// hard link, setuid and device files: overlay2's lower layers as
		// dockerd unpacked them on the volume.
		script := `cat /etc/motd; test ! -e /etc/deleteme && echo whiteout; ls /opt/old; cat /srv/data;
[ "$(stat -c %i /usr/bin/hello)" = "$(stat -c %i /usr/bin/hello-again)" ] && echo hardlink; /usr/bin/hello;
stat -c '%a %t:%T' /usr/bin/suid /var/null`
		want := "top layer\nwhiteout\nnew\na file where a directory was\nhardlink\nhello from gvx\n4755 0:0\n666 1:3\n"
		if out := b.docker(t, "run", "--rm", "gvx.test/layered", "sh", "-c", script); out != want {
			t.Errorf("the layered test image in a container:\n%s\nwant:\n%s", out, want)
		}
	})

	t.Run("networks", func(t *testing.T) {
		// A user network: containers reach each other by name through
		// dockerd's embedded DNS, over the bridge and veths in the Sentry.
		b.docker(t, "network", "create", "gvxnet")
		b.docker(t, "run", "-d", "--name", "server", "--network", "gvxnet", "busybox",
			"sh", "-c", "mkdir /www && echo served > /www/index.html && exec httpd -f -p 80 -h /www")
		out := b.docker(t, "run", "--rm", "--network", "gvxnet", "busybox",
			"sh", "-c", "for i in $(seq 50); do wget -q -O - http://server/ && exit 0; sleep 0.2; done; exit 1")
		if out != "served\n" {
			t.Errorf("wget http://server/ from another container: %q", out)
		}
		b.docker(t, "rm", "-f", "server")
		b.docker(t, "network", "rm", "gvxnet")
	})
}

// TestCompose runs Compose inside the sandbox, as an agent would: two
// services, one reaching the other by name over the project's network, and
// a port Compose publishes inside (8080) that rungv publishes to the host.
func TestCompose(t *testing.T) {
	requireSuite(t)
	port := freePort(t)
	b := newEpisode(t, "-p", fmt.Sprintf("127.0.0.1:%d:8080", port))
	compose := env.built.ComposeCommand()
	b.writeFile(t, "/root/app/compose.yaml", `services:
  web:
    image: busybox
    command: ["sh", "-c", "mkdir -p /www && echo compose web ok > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: ["8080:8080"]
  client:
    image: busybox
    depends_on: [web]
    command: ["sh", "-c", "until wget -q -O /tmp/page http://web:8080/; do sleep 0.2; done; cat /tmp/page; exec sleep 3600"]
`)
	out, code := b.exec(t, "/root/app", append(compose, "-p", "app", "up", "-d")...)
	if code != 0 {
		t.Fatalf("%s up -d: exit %d\n%s\ndockerd log:\n%s", strings.Join(compose, " "), code, out, logTail(b.log.String(), 20))
	}
	eventually.Within(t, 30*time.Second, "the client service to fetch http://web:8080/ by service name", func() (bool, error) {
		out, _ := b.exec(t, "/root/app", append(compose, "-p", "app", "logs", "client")...)
		return strings.Contains(out, "compose web ok"), fmt.Errorf("its logs: %q", out)
	})

	got := httpGetRetry(t, fmt.Sprintf("http://127.0.0.1:%d/", port), 20*time.Second)
	if got != "compose web ok\n" {
		t.Errorf("GET the compose-published port through rungv's -p: %q", got)
	}

	out, code = b.exec(t, "/root/app", append(compose, "-p", "app", "down")...)
	if code != 0 {
		t.Fatalf("%s down: exit %d\n%s", strings.Join(compose, " "), code, out)
	}
	if out := b.docker(t, "ps", "-a", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("containers left after compose down: %q", out)
	}
	if out := b.docker(t, "network", "ls", "--format", "{{.Name}}"); strings.Contains(out, "app_default") {
		t.Errorf("the project's network is left after compose down: %q", out)
	}
}

// TestSeedWorkflow: episodes cloned from the golden volume see the seed's
// images at once and nothing of each other.
func TestSeedWorkflow(t *testing.T) {
	requireVolumes(t)
	g := golden(t)
	before, err := os.Stat(g)
	if err != nil {
		t.Fatal(err)
	}

	ep1vol := cloneGolden(t)
	ep1 := startBox(t, boxOptions{volume: ep1vol})
	// The images are there without any load.
	out := ep1.docker(t, "images", "--format", "{{.Repository}}:{{.Tag}}")
	for _, img := range seedImages {
		if !strings.Contains(out, img) {
			t.Fatalf("a fresh episode's dockerd lists %q, without %s", out, img)
		}
	}
	ep1.docker(t, "run", "-d", "--name", "ep1-running", "busybox", "sleep", "3600")
	ep1.docker(t, "create", "--name", "ep1-created", "busybox", "true")
	ep1.docker(t, "tag", "busybox", "gvx.test/ep1:mark")
	ep1.docker(t, "volume", "create", "ep1-volume")
	if err := ep1.stop(60 * time.Second); err != nil {
		t.Fatalf("stopping episode 1: %v\n%s", err, logTail(ep1.log.String(), 20))
	}
	if err := checkVolume(ep1vol); err != nil {
		t.Fatalf("episode 1's volume after SIGINT: %v", err)
	}

	ep2 := startBox(t, boxOptions{volume: cloneGolden(t)})
	if out := ep2.docker(t, "ps", "-a", "--format", "{{.Names}}"); strings.TrimSpace(out) != "" {
		t.Errorf("episode 2 sees containers: %q", out)
	}
	if out := ep2.docker(t, "images", "--format", "{{.Repository}}:{{.Tag}}"); strings.Contains(out, "ep1") {
		t.Errorf("episode 2 sees episode 1's image tag: %q", out)
	}
	if out := ep2.docker(t, "volume", "ls", "-q"); strings.Contains(out, "ep1-volume") {
		t.Errorf("episode 2 sees episode 1's volume: %q", out)
	}
	if out := ep2.docker(t, "run", "--rm", "busybox", "echo", "ep2"); out != "ep2\n" {
		t.Errorf("episode 2 docker run: %q", out)
	}

	// Episode 1's own volume still holds what it did: restarting on it
	// brings its containers back.
	ep1again := startBox(t, boxOptions{volume: ep1vol})
	if out := ep1again.docker(t, "ps", "-a", "--format", "{{.Names}}"); !strings.Contains(out, "ep1-running") || !strings.Contains(out, "ep1-created") {
		t.Errorf("episode 1's volume, restarted, lists containers %q", out)
	}

	after, err := os.Stat(g)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
		t.Errorf("the golden volume changed while episodes ran: %v %d → %v %d", before.ModTime(), before.Size(), after.ModTime(), after.Size())
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// httpGetRetry GETs url until it answers 200 or timeout passes.
func httpGetRetry(t *testing.T, url string, timeout time.Duration) string {
	t.Helper()
	client := &http.Client{Timeout: 3 * time.Second}
	var body []byte
	eventually.Within(t, timeout, "GET "+url+" to answer 200", func() (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err = io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("status %s, %v", resp.Status, err)
		}
		return true, nil
	})
	return string(body)
}
