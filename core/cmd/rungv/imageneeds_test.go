package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/spec"
)

// TestCheckDockerd: a command that starts dockerd with its defaults,
// directly or under an init, is refused without nftables, naming the
// flags or the spec's fields; dockerd --iptables=false, other commands,
// and any command with nftables pass.
func TestCheckDockerd(t *testing.T) {
	for _, c := range []struct {
		argv     []string
		nftables bool
		refused  bool
	}{
		{[]string{"dockerd", "--tls=false"}, false, true},
		{[]string{"/usr/local/bin/dockerd-entrypoint.sh", "--tls=false"}, false, true},
		{[]string{"/usr/local/sbin/gvx-dockerd"}, false, true},
		{[]string{"tini", "-s", "--", "/usr/bin/dockerd"}, false, true},
		{[]string{"dockerd", "--tls=false"}, true, false},
		{[]string{"dockerd", "--iptables=false"}, false, false},
		{[]string{"dockerd", "--iptables", "false"}, false, false},
		{[]string{"ls", "/usr/bin/dockerd"}, false, false},
		{[]string{"sh", "-c", "dockerd"}, false, false},
		{nil, false, false},
	} {
		err := checkDockerd(c.argv, c.nftables, false)
		if (err != nil) != c.refused {
			t.Errorf("checkDockerd(%q, nftables %v): %v; want refused %v", c.argv, c.nftables, err, c.refused)
			continue
		}
		if err != nil && !strings.Contains(err.Error(), "add --nftables --net-raw") {
			t.Errorf("checkDockerd(%q): %q does not name the flags", c.argv, err)
		}
		// gvx's Docker image mounts the cgroups dockerd needs; another
		// image's dockerd would fail on them next.
		if ours := strings.HasSuffix(strings.Join(c.argv, " "), "gvx-dockerd"); err != nil && strings.Contains(err.Error(), "cgroup v1") == ours {
			t.Errorf("checkDockerd(%q): %q; want the cgroups named only for an image other than gvx's", c.argv, err)
		}
	}
	if err := checkDockerd([]string{"dockerd"}, false, true); err == nil || !strings.Contains(err.Error(), `"nftables": true and "net_raw": true`) {
		t.Errorf("checkDockerd from a spec: %v; want it to name the spec's fields", err)
	}
}

// TestRunImageNeeds runs an image whose label asks for --nftables and
// --net-raw: rungv turns them on and says so (guest root then has
// CAP_NET_RAW), ignores a feature it does not know, saying so, leaves
// off what the command line turns off by name, and reads no label for a
// --spec.
func TestRunImageNeeds(t *testing.T) {
	img := labelledImage(t, map[string]string{image.NeedsLabel: "nftables,net-raw,bogus"})
	const capEff = "grep CapEff /proc/self/status"

	_, errOut, code := runCLI(t, "", "run", "-q", img, "true")
	if code != 0 || !strings.Contains(errOut, "rungv: the image needs --nftables --net-raw (label "+image.NeedsLabel+`="nftables,net-raw,bogus"): turned on; --nftables=false --net-raw=false refuses`) ||
		!strings.Contains(errOut, "names bogus, which this rungv does not know: ignored") {
		t.Fatalf("rungv run IMAGE: exit %d, stderr %q; want the features it turned on and the one it ignored named", code, errOut)
	}
	out, _, code := runCLI(t, "", "run", "-q", img, "sh", "-c", capEff)
	if code != 0 || !hasNetRaw(t, out) {
		t.Errorf("the labelled image's guest root: exit %d %q; want CAP_NET_RAW", code, out)
	}

	out, errOut, code = runCLI(t, "", "run", "-q", "--nftables=false", "--net-raw=false", img, "sh", "-c", capEff)
	if code != 0 || hasNetRaw(t, out) || !strings.Contains(errOut, "the image needs --nftables --net-raw") || !strings.Contains(errOut, "which the command line turns off") {
		t.Errorf("--nftables=false --net-raw=false: exit %d, %q, stderr %q; want both left off, saying so", code, out, errOut)
	}

	file := filepath.Join(t.TempDir(), "box.json")
	writeJSON(t, file, spec.Sandbox{Image: img, Cmd: []string{"sh", "-c", capEff}})
	out, errOut, code = runCLI(t, "", "run", "-q", "--spec", file)
	if code != 0 || hasNetRaw(t, out) || strings.Contains(errOut, "the image needs") {
		t.Errorf("--spec: exit %d, %q, stderr %q; want the label not read", code, out, errOut)
	}
}

// TestRunDockerdWithoutNFTables: the seed's command, as a new user types
// it, on an image whose entrypoint is dockerd and that has no label of
// gvx's fails at once, before the sandbox boots or its volume is
// created, naming the flags; dockerd --iptables=false is let through.
func TestRunDockerdWithoutNFTables(t *testing.T) {
	img := labelledImage(t, nil, "dockerd")
	dir := t.TempDir()
	golden := filepath.Join(dir, "golden.ext4")
	_, errOut, code := runCLI(t, "", "run", "-q", "-p", "unix:"+filepath.Join(dir, "d.sock")+":2375",
		"--mount", "type=volume,src="+golden+",dst=/var/lib/docker", "-e", "DOCKER_TLS_CERTDIR=", img, "--tls=false")
	if code != 1 || !strings.Contains(errOut, "rungv: the command runs dockerd") || !strings.Contains(errOut, "add --nftables --net-raw") {
		t.Fatalf("the seed's command on an unlabelled dockerd image: exit %d, stderr %q; want exit 1 (rungv's own failure) and the flags named", code, errOut)
	}
	if _, err := os.Stat(golden); !os.IsNotExist(err) {
		t.Errorf("%s after the refused start: %v; want it not created", golden, err)
	}
	_, errOut, code = runCLI(t, "", "run", "-q", img, "--iptables=false")
	if code != 127 || strings.Contains(errOut, "nftables") {
		t.Errorf("dockerd --iptables=false: exit %d, stderr %q; want it let through (and not found in this image: 127)", code, errOut)
	}
}

// labelledImage writes the test image with labels and, if given, an
// entrypoint, as an OCI layout, and returns its reference.
func labelledImage(t *testing.T, labels map[string]string, entrypoint ...string) string {
	t.Helper()
	busybox, err := os.ReadFile(testimage.BusyboxPath)
	if err != nil {
		t.Skipf("%v (apt-get install busybox-static)", err)
	}
	img, err := testimage.Image([][]testimage.Entry{testimage.BaseLayer(busybox)})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg := cf.Config
	cfg.Labels, cfg.Entrypoint = labels, entrypoint
	if img, err = mutate.Config(img, cfg); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "oci")
	if err := testimage.WriteLayout(img, dir); err != nil {
		t.Fatal(err)
	}
	return "oci:" + dir + ":latest"
}

// hasNetRaw reads a CapEff line of /proc/PID/status for CAP_NET_RAW.
func hasNetRaw(t *testing.T, line string) bool {
	t.Helper()
	_, hex, ok := strings.Cut(strings.TrimSpace(line), ":")
	caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
	if !ok || err != nil {
		t.Fatalf("not a CapEff line: %q", line)
	}
	const capNetRaw = 13
	return caps&(1<<capNetRaw) != 0
}
