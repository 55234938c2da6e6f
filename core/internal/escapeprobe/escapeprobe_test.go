package escapeprobe

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBatteryCatchesAnEscape runs the battery's script on the host itself,
// unsandboxed, with probes that do what an escape would (harmlessly): a
// file in a host directory the test does not name, the secret read, a
// host listener reached, the canary killed, a probe that hangs. Each must
// be reported; without this the escape battery's zeros would prove
// nothing.
func TestBatteryCatchesAnEscape(t *testing.T) {
	dir := t.TempDir()
	// A host directory outside the excluded ones, as an escape would
	// write to (removed at the end).
	outside, err := os.MkdirTemp("/tmp", "gvx-escapeprobe-outside-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(outside)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host, err := NewHost(dir, self)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	probes := []Probe{
		{Name: "plant", Group: "files", Script: `echo escaped > ` + outside + `/planted`},
		{Name: "read-secret", Group: "files", Script: `cat $SECRET_FILE`},
		{Name: "connect", Group: "sockets", Script: `bash -c 'echo x > /dev/tcp/${HOST_TCP%:*}/${HOST_TCP##*:}'`},
		{Name: "kill-canary", Group: "processes", Script: `kill -9 $CANARY_PID`},
		{Name: "hang", Group: "hang", Script: `exec /bin/busybox sleep 60`},
	}
	b := Battery{
		Probes:  probes,
		Timeout: 2 * time.Second,
		Host:    host,
		Exclude: []string{dir},
		Command: func(script string) *exec.Cmd {
			cmd := exec.Command("/bin/sh", "-c", script)
			cmd.Env = append(os.Environ(), host.Env()...)
			return cmd
		},
		Tries: 1,
		Logf:  t.Logf,
	}
	rep := b.Run()
	t.Logf("report: %+v", rep)
	effects := strings.Join(rep.Effects, "\n")
	for _, want := range []string{
		"after files: files: + " + filepath.Join(outside, "planted"),
		"the guest's output holds the host's secret",
		"accepted a connection",
		"the host canary process",
	} {
		if !strings.Contains(effects, want) {
			t.Errorf("the report's effects lack %q:\n%s", want, effects)
		}
	}
	if len(rep.Hangs) != 1 || !strings.HasPrefix(rep.Hangs[0], "probe hang ") {
		t.Errorf("hangs = %q; want the probe hang", rep.Hangs)
	}
	if rep.Tried != len(probes) {
		t.Errorf("tried %d probes; want %d", rep.Tried, len(probes))
	}
}
