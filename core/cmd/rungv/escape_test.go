package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/escapeprobe"
	"z.gfire.dev/gvx/internal/battery"
)

// TestBatteryEscape is the escape part of the reliability battery (issue
// 17) as guest root directly in a sandbox: every probe of escapeprobe
// (host files, processes, devices, mounts, kernel interfaces, sockets to
// host paths, the clock, names, sysctls, set-ID bits, reboot) in one
// sandbox with NAT, raw sockets, set-ID bits honoured and a volume,
// comparing the host after each group (each probe in full mode, and three
// rounds). No probe may change the host, hang, or make rungv panic.
func TestBatteryEscape(t *testing.T) {
	dir, err := os.MkdirTemp("", "gvx-escape-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	img, err := escapeprobe.WriteImage(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	if out, errOut, code := rungv(t, cache, "pull", "-q", img.LayoutRef()); code != 0 {
		t.Fatalf("pull: exit %d %s %s", code, out, errOut)
	}
	host, err := escapeprobe.NewHost(dir, rungvBinary)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	vol := filepath.Join(dir, "vol.ext4")
	flags := []string{"--cache", cache, "run", "-q", "-i", "--network", "nat", "--allow-net", "192.0.2.1/32:9",
		"--net-raw", "--allow-suid", "--mount", "type=volume,src=" + vol + ",dst=/data"}
	for _, e := range host.Env() {
		flags = append(flags, "-e", e)
	}
	b := escapeprobe.Battery{
		Probes:   escapeprobe.Select(escapeprobe.Sandbox),
		PerProbe: battery.Full(),
		Timeout:  10 * time.Second,
		Host:     host,
		Exclude:  []string{dir, filepath.Dir(rungvBinary), sharedCache(t)},
		Command: func(script string) *exec.Cmd {
			return exec.Command(rungvBinary, append(flags, img.LayoutRef(), "sh", "-c", script)...)
		},
		Tries: 3,
		Logf:  t.Logf,
	}
	var total escapeprobe.Report
	start := time.Now()
	for round := 0; round < battery.Count(1, 3); round++ {
		total.Add(b.Run())
	}
	// The volume is a plain file on the host whatever the guest put in it.
	if st, err := os.Stat(vol); err != nil || st.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeType) != 0 {
		total.Effects = append(total.Effects, fmt.Sprintf("the volume file on the host: %v %v", st.Mode(), err))
	}
	total.Judge(t, "Escape probes, guest root in a sandbox (core/cmd/rungv TestBatteryEscape)", time.Since(start))
}
