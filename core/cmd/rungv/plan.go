package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/core/host"
	"z.gfire.dev/gvx/core/netstack"
	"z.gfire.dev/gvx/core/sentry"
	"z.gfire.dev/gvx/core/spec"
)

// planSandbox checks sp once, before anything is pulled or booted — the
// spec's own rules (spec.Validate), then what this host gives: limits,
// CPUs, hostname, working directory and user syntax, network rules and
// socket paths — and returns the Sentry's and the network's
// configuration. Its errors name the spec's fields (*spec.FieldError,
// *fieldError); dns are the test-only DNS relays (--dns-upstream).
func planSandbox(sp *spec.Sandbox, dns []netip.AddrPort) (sentry.Config, netstack.Config, error) {
	if err := sp.Validate(); err != nil {
		return sentry.Config{}, netstack.Config{}, err
	}
	if err := checkWorkdir(sp.Workdir); err != nil {
		return sentry.Config{}, netstack.Config{}, err
	}
	if sp.User != "" {
		if err := host.CheckUser(sp.User); err != nil {
			return sentry.Config{}, netstack.Config{}, &fieldError{"user", "", err.Error(), err}
		}
	}
	cfg, err := sentryConfig(sp)
	if err != nil {
		return cfg, netstack.Config{}, err
	}
	netCfg, err := networkConfig(sp, dns)
	return cfg, netCfg, err
}

// sentryConfig returns the Sentry's configuration for sp, which
// spec.Validate has passed.
func sentryConfig(sp *spec.Sandbox) (sentry.Config, error) {
	cfg := sentry.Config{
		Platform:               sentry.PlatformSystrap,
		Hostname:               sp.Hostname,
		MemoryLimit:            sp.Memory,
		CPUs:                   cpuCount(sp.CPUs),
		PidsLimit:              sp.PidsLimit, // 0 and -1 mean what they mean to the Sentry
		NetRaw:                 sp.NetRaw,
		AllowPacketSocketWrite: sp.AllowPacketSocketWrite,
		AllowSUID:              sp.AllowSUID,
		NFTables:               sp.NFTables,
	}
	switch sp.Platform {
	case spec.PlatformKVM:
		cfg.Platform = sentry.PlatformKVM
	case spec.PlatformPtrace:
		cfg.Platform = sentry.PlatformPtrace
	}
	spin, err := spinning(sp)
	if err != nil {
		return cfg, err
	}
	cfg.NoSpinning = !spin
	if len(sp.CPUSet) > 0 {
		var allowed unix.CPUSet
		if err := unix.SchedGetaffinity(0, &allowed); err != nil {
			return cfg, fmt.Errorf("reading the CPUs this process may run on, for the sandbox's cpuset: %w", err)
		}
		if err := checkCPUs(sp.CPUSet, &allowed); err != nil {
			return cfg, err
		}
		cfg.CPUSet = sp.CPUSet
	}
	if err := cfg.CheckLimits(); err != nil {
		return cfg, limitError(sp, err)
	}
	if sp.Hostname != "" {
		if err := sentry.CheckHostname(sp.Hostname); err != nil {
			return cfg, &fieldError{"hostname", "", err.Error(), err}
		}
	}
	for _, m := range sp.Mounts {
		src, err := filepath.Abs(m.Source)
		if err != nil {
			return cfg, err
		}
		cfg.Volumes = append(cfg.Volumes, sentry.Volume{Path: src, Target: path.Clean(m.Target), ReadOnly: m.ReadOnly})
	}
	return cfg, nil
}

// spinning says whether systrap's threads spin: as the spec says, else as
// $GVX_SPIN says (the SDK leaves Spin unset for the sandboxes its SpinAuto
// lets spin), else yes.
func spinning(sp *spec.Sandbox) (bool, error) {
	if sp.Spin != nil {
		return *sp.Spin, nil
	}
	v := os.Getenv(spinEnv)
	if v == "" {
		return true, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: want 1 (spin) or 0 (sleep)", spinEnv, v)
	}
	return on, nil
}

// cpuCount turns the spec's CPUs, which spec.Validate found finite and not
// negative, into the count of CPUs the guest sees, rounded up (docker's
// --cpus 1.5 is a share of CPU time; a guest sees whole CPUs).
func cpuCount(v float64) int {
	if v > sentry.MaxCPUs {
		return sentry.MaxCPUs + 1 // CheckLimits names the bound, without overflowing an int
	}
	return int(math.Ceil(v))
}

// limitError restates a *sentry.LimitError as a problem with the spec's
// field, with the field's value.
func limitError(sp *spec.Sandbox, err error) error {
	var le *sentry.LimitError
	if !errors.As(err, &le) {
		return err
	}
	field, value := le.Field, le.Value
	switch le.Field {
	case "CPUs":
		field, value = "cpus", strconv.FormatFloat(sp.CPUs, 'g', -1, 64)
	case "CPUSet":
		field, value = "cpuset", formatCPUList(sp.CPUSet)
	case "MemoryLimit":
		field, value = "memory", strconv.FormatUint(sp.Memory, 10)
	case "PidsLimit":
		field, value = "pids_limit", strconv.Itoa(sp.PidsLimit)
	}
	return &fieldError{field, value, le.Problem + "; " + le.Fix, err}
}

// cpuSetSize is how many CPUs a unix.CPUSet, and so any affinity, holds.
const cpuSetSize = len(unix.CPUSet{}) * 64

// checkCPUs checks that every CPU in cpus is one of allowed, the CPUs this
// process may run on.
func checkCPUs(cpus []int, allowed *unix.CPUSet) error {
	for _, c := range cpus {
		if !allowed.IsSet(c) {
			return &fieldError{"cpuset", formatCPUList(cpus), fmt.Sprintf("names CPU %d, which this process may not run on: it may use %d CPUs, %s; pick CPUs from those", c, allowed.Count(), sentry.FormatCPUSet(allowed)), nil}
		}
	}
	return nil
}

// formatCPUList writes cpus as a CPU list, runs of consecutive CPUs as
// ranges: [0 1 2 3 6] is "0-3,6".
func formatCPUList(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// createMissingVolumes creates, as docker creates named volumes, every
// writable volume whose file does not exist yet, and says so on w unless
// it is nil: a mistyped path would otherwise pass unnoticed, and the user
// learns the size it got. vols are sentryConfig's, one for each of the
// spec's mounts, in order.
func createMissingVolumes(vols []sentry.Volume, w io.Writer) error {
	for i, v := range vols {
		field := fmt.Sprintf("mounts[%d].source", i)
		_, err := os.Stat(v.Path)
		switch {
		case err == nil:
			continue
		case !errors.Is(err, os.ErrNotExist):
			return &fieldError{field, "", err.Error(), err}
		case v.ReadOnly:
			return &fieldError{field, v.Path, fmt.Sprintf("does not exist, and a read-only volume is not created; create it with `rungv volume create %s`", v.Path), nil}
		}
		if err := ext4lite.Create(v.Path, defaultVolumeSize); err != nil {
			return &fieldError{field, v.Path, fmt.Sprintf("cannot be created: %v", err), err}
		}
		if w != nil {
			fmt.Fprintf(w, "rungv: created the volume %s, %d GiB, sparse (`rungv volume create %s --size N` first for another size)\n", v.Path, defaultVolumeSize>>30, v.Path)
		}
	}
	return nil
}

// volumeError restates a *sentry.VolumeError as a problem with the mount
// of vols (sentryConfig's) that named the volume.
func volumeError(err error, vols []sentry.Volume) error {
	var ve *sentry.VolumeError
	if !errors.As(err, &ve) {
		return err
	}
	for i, v := range vols {
		if v.Target == ve.Target {
			return &fieldError{fmt.Sprintf("mounts[%d].source", i), "", fmt.Sprintf("%s the volume %s: %v", ve.Op, ve.Volume, ve.Err), err}
		}
	}
	return err
}
