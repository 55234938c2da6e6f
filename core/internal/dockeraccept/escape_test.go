package dockeraccept

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/internal/escapeprobe"
	"z.gfire.dev/gvx/internal/battery"
)

// TestBatteryEscapeDocker is the escape part of the reliability battery
// (issue 17) from inside `docker run --privileged` in a Docker-in-gvx
// sandbox, sharing the sandbox's pids and network: the escape probes that
// mean something there, and the container's way out into its sandbox
// (nsenter into the sandbox's init, its disks), comparing the host after each group (each probe in full
// mode). No probe may change the host, hang, or make rungv panic.
func TestBatteryEscapeDocker(t *testing.T) {
	if env.skip != "" {
		battery.Skip(t, env.skip)
	}
	dir, err := os.MkdirTemp("", "gvx-escd-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	img, err := escapeprobe.WriteImage(dir)
	if err != nil {
		t.Fatal(err)
	}
	host, err := escapeprobe.NewHost(dir, env.rungv)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	start := time.Now()
	b := startBox(t, boxOptions{})
	b.docker(t, "load", "-q", "-i", img.Archive)
	// Sharing the sandbox's pids and network: nsenter -t 1 reaches the
	// sandbox's init, the container's way out.
	args := []string{"run", "-i", "--rm", "--privileged", "--pid", "host", "--network", "host"}
	for _, e := range host.Env() {
		args = append(args, "-e", e)
	}
	bat := escapeprobe.Battery{
		Probes:   escapeprobe.Select(escapeprobe.Docker),
		PerProbe: battery.Full(),
		Timeout:  10 * time.Second,
		Host:     host,
		Exclude:  []string{dir, env.tmp, env.cache, b.dir},
		Command: func(script string) *exec.Cmd {
			return b.dockerCmd(append(args, escapeprobe.Tag, "sh", "-c", script)...)
		},
		Tries: 3,
		Logf:  t.Logf,
	}
	var total escapeprobe.Report
	for round := 0; round < battery.Count(1, 2); round++ {
		total.Add(bat.Run())
	}
	if err := b.stop(60 * time.Second); err != nil {
		total.Failures = append(total.Failures, fmt.Sprintf("stopping the sandbox: %v\n%s", err, logTail(b.log.String(), 20)))
	}
	if p := escapeprobe.PanicIn(b.log.String()); p != "" {
		total.Panics = append(total.Panics, "rungv: "+p)
	}
	total.Judge(t, "Escape probes, root in `docker run --privileged` in a Docker-in-gvx sandbox (core/internal/dockeraccept TestBatteryEscapeDocker)", time.Since(start))
}
