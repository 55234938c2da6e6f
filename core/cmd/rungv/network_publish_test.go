package main

// Published ports (-p): TCP and unix sockets from the host to the guest.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/eventually"
	"z.gfire.dev/gvx/core/netstack/netstacktest"
)

// startRungv starts a long-running sandbox and returns its command and
// a buffer with its stderr.
func startRungv(t *testing.T, flags []string, script string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cache, ref := netTestImage(t)
	args := append([]string{"--cache", cache, "run"}, flags...)
	args = append(args, ref, "sh", "-c", script)
	cmd := exec.Command(rungvBinary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, &stderr
}

// httpGet fetches url with client, retrying until the guest's server is
// up or the deadline passes.
func httpGet(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	var body []byte
	eventually.Within(t, 15*time.Second, "GET "+url+" answered 200", func() (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		if body, err = io.ReadAll(resp.Body); err != nil {
			return false, err
		}
		return resp.StatusCode == 200, fmt.Errorf("status %s", resp.Status)
	})
	return string(body)
}

func unixClient(path string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
}

const httpdScript = `mkdir -p /tmp/www && echo "guest httpd" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www`

func TestPublishedPortsFromTheHost(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "web.sock")
	port := netstacktest.FreePort(t)
	for _, network := range []string{"none", "nat"} {
		t.Run(network, func(t *testing.T) {
			flags := []string{"--network", network, "-p", "unix:" + sock + ":8080", "-p", fmt.Sprintf("127.0.0.1:%d:8080", port)}
			cmd, stderr := startRungv(t, flags, httpdScript)
			if got := httpGet(t, unixClient(sock), "http://guest/"); got != "guest httpd\n" {
				t.Errorf("through -p unix: %q", got)
			}
			if got := httpGet(t, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/", port)); got != "guest httpd\n" {
				t.Errorf("through -p 127.0.0.1:%d:8080: %q", port, got)
			}
			if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("the published socket: %v %v, want mode 0600", st.Mode(), err)
			}
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			waitGone(t, sock)
			if t.Failed() {
				t.Logf("rungv stderr:\n%s", stderr)
			}
		})
	}

	// -p GUESTPORT: the host picks the port, and rungv says which on
	// stderr before the sandbox starts.
	cache, ref := netTestImage(t)
	cmd := exec.Command(rungvBinary, "--cache", cache, "run", "-p", "8080", ref, "sh", "-c", httpdScript)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	announced := regexp.MustCompile(`^rungv: published 127\.0\.0\.1:(\d+) -> 8080/tcp$`)
	lines := bufio.NewScanner(stderr)
	chosen := ""
	for chosen == "" && lines.Scan() {
		if m := announced.FindStringSubmatch(lines.Text()); m != nil {
			chosen = m[1]
		}
	}
	if chosen == "" {
		t.Fatal("rungv -p 8080 did not say which host port it published")
	}
	go io.Copy(io.Discard, stderr)
	if got := httpGet(t, http.DefaultClient, "http://127.0.0.1:"+chosen+"/"); got != "guest httpd\n" {
		t.Errorf("through -p 8080 (host port %s): %q", chosen, got)
	}
}

func TestPublishedSocketRemovedAfterKill9(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "docker.sock")
	ctl := filepath.Join(dir, "control.sock")
	cmd, _ := startRungv(t, []string{"-p", "unix:" + sock + ":8080", "--control", "unix:" + ctl}, httpdScript)
	if got := httpGet(t, unixClient(sock), "http://guest/"); got != "guest httpd\n" {
		t.Fatalf("through -p unix: %q", got)
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitGone(t, sock)
	waitGone(t, ctl)
}

func TestPublishedRawTCPHalfClose(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "nc.sock")
	startRungv(t, []string{"-p", "unix:" + sock + ":9000"}, `exec nc -l -p 9000 -e cat`)
	payload := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	var got []byte
	eventually.Within(t, 15*time.Second, "the guest's nc echoing", func() (bool, error) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false, err // rungv is starting
		}
		defer c.Close()
		go func() {
			io.WriteString(c, payload)
			c.(*net.UnixConn).CloseWrite()
		}()
		c.SetDeadline(time.Now().Add(15 * time.Second))
		got, err = io.ReadAll(c)
		// Nothing back: the guest's nc was not listening yet, and the
		// relay closed the connection at once.
		return len(got) > 0, err
	})
	if string(got) != payload {
		t.Fatalf("1 MiB echoed by the guest: %d bytes", len(got))
	}
}
