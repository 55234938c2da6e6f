package main

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/spec"
)

// TestFlagsBuildTheSpec: rungv run's flags and arguments fill one
// spec.Sandbox, field for field.
func TestFlagsBuildTheSpec(t *testing.T) {
	t.Setenv("FROM_HOST", "h")
	t.Setenv(spinEnv, "")
	envFile := filepath.Join(t.TempDir(), "env")
	if err := os.WriteFile(envFile, []byte("# comment\nB=file\nA=file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	no, none, sh := false, []string{}, []string{"/bin/sh"}
	for _, c := range []struct {
		args []string
		want spec.Sandbox
	}{
		{[]string{"img"}, spec.Sandbox{Image: "img"}},
		{[]string{"-e", "A=flag", "-e", "FROM_HOST", "-e", "UNSET_ON_HOST", "--env-file", envFile, "-w", "/w", "-u", "1:2", "--hostname", "h", "img", "sh", "-c", "x"},
			spec.Sandbox{Image: "img", Cmd: []string{"sh", "-c", "x"}, Env: []string{"B=file", "A=flag", "FROM_HOST=h"}, Workdir: "/w", User: "1:2", Hostname: "h"}},
		{[]string{"--entrypoint", "/bin/sh", "img", "-c", "true"}, spec.Sandbox{Image: "img", Entrypoint: &sh, Cmd: []string{"-c", "true"}}},
		{[]string{"--entrypoint", "", "img", "ls"}, spec.Sandbox{Image: "img", Entrypoint: &none, Cmd: []string{"ls"}}},
		{[]string{"--keep-alive", "--platform", "kvm", "--spin=false", "img"}, spec.Sandbox{Image: "img", KeepAlive: true, Platform: spec.PlatformKVM, Spin: &no}},
		{[]string{"--restore", "ready.snap", "--network", "none", "img"}, spec.Sandbox{Image: "img", Restore: "ready.snap", Network: spec.NetworkNone}},
		{[]string{"--network", "nat", "-p", "unix:rel.sock:2375", "-p", "8080:80", "-p", "0.0.0.0:5353:53/udp", "-p", "[::1]:8443:443/tcp", "-p", "9000",
			"--allow-net", "10.0.0.0/8", "--allow-net", "[2001:db8::/32]:443", "--host-loopback", "--net-raw", "--nftables", "--allow-packet-socket-write", "--allow-suid", "img"},
			spec.Sandbox{Image: "img", Network: spec.NetworkNAT, Ports: []spec.Port{
				{HostPath: "rel.sock", GuestPort: 2375}, {HostPort: 8080, GuestPort: 80}, {HostIP: "0.0.0.0", HostPort: 5353, GuestPort: 53, Protocol: "udp"},
				{HostIP: "::1", HostPort: 8443, GuestPort: 443}, {GuestPort: 9000}},
				AllowNet: []string{"10.0.0.0/8", "[2001:db8::/32]:443"}, HostLoopback: true, NetRaw: true, NFTables: true, AllowPacketSocketWrite: true, AllowSUID: true}},
		{[]string{"--mount", "type=volume,src=v.ext4,dst=/data/", "--mount", "source=/abs/w.ext4,target=/w,ro", "img"},
			spec.Sandbox{Image: "img", Mounts: []spec.Mount{{Type: spec.MountVolume, Source: "v.ext4", Target: "/data"}, {Type: spec.MountVolume, Source: "/abs/w.ext4", Target: "/w", ReadOnly: true}}}},
		{[]string{"-m", "1.5g", "--cpus", "1.5", "--cpuset-cpus", "0-2,5", "--pids-limit", "100", "--timeout", "90s", "img"},
			spec.Sandbox{Image: "img", Memory: 3 << 29, CPUs: 1.5, CPUSet: []int{0, 1, 2, 5}, PidsLimit: 100, Timeout: spec.Seconds(90 * time.Second)}},
		// docker run's 0 means no limit; the spec's 0 is the default.
		{[]string{"--pids-limit", "0", "img"}, spec.Sandbox{Image: "img", PidsLimit: -1}},
		{[]string{"--pids-limit", "-1", "img"}, spec.Sandbox{Image: "img", PidsLimit: -1}},
	} {
		got, _, err := parseRun(t, c.args...)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q builds\n%+v\nwant\n%+v", c.args, got, c.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%q: the spec it builds fails its check: %v", c.args, err)
		}
	}
}

// TestSpecErrorsNameTheFlag: what the spec's checks (spec.Validate and this
// host's) refuse is reported on the command line with the flag and the
// value as typed.
func TestSpecErrorsNameTheFlag(t *testing.T) {
	long := "/tmp/" + strings.Repeat("x", 110) + ".sock"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--cpus", "NaN"}, "--cpus NaN is not a number of CPUs"},
		{[]string{"--cpus", "30000"}, "--cpus 30000 is more than the 1024 CPUs a sandbox may see; give at most 1024"},
		{[]string{"--memory", "2t"}, "--memory 2t is more than the maximum of 1 TiB; give at most 1 TiB, or 0 for no limit"},
		{[]string{"--memory", "1k"}, "--memory 1k is below the minimum of 16 MiB"},
		{[]string{"--cpuset-cpus", "0-99999"}, "--cpuset-cpus 0-99999 names CPU "},
		{[]string{"--pids-limit", "-2"}, "--pids-limit -2 is negative; give a count of tasks, or -1 for no limit"},
		{[]string{"--timeout", "-1s"}, "--timeout -1s is negative; give a duration, or 0 for none"},
		{[]string{"--keep-alive", "img", "true"}, "--keep-alive runs an idle init: give no COMMAND and no --entrypoint"},
		{[]string{"--restore", "x.snap", "--entrypoint", "sh"}, "--restore continues the snapshot's own init: give no COMMAND"},
		{[]string{"--allow-net", "10.0.0.0/8"}, "--allow-net restricts the NAT: add --network nat"},
		{[]string{"--host-loopback"}, "--host-loopback needs the NAT: add --network nat"},
		{[]string{"--allow-packet-socket-write"}, "--allow-packet-socket-write lets packet sockets send, and packet sockets need --net-raw: add it"},
		{[]string{"--network", "nat", "--allow-net", "10.0.0.1/8"}, `--allow-net "10.0.0.1/8" has host bits set; write 10.0.0.0/8`},
		{[]string{"--network", "nat", "--allow-net", "example.com"}, "names are not resolved"},
		{[]string{"--network", "nat", "--allow-net", "10.0.0.0/8:0"}, `--allow-net "10.0.0.0/8:0" has port "0", which must be 1-65535`},
		{[]string{"--network", "nat", "--allow-net", "127.0.0.1"}, "--allow-net: allow rule 127.0.0.1/32: the guest reaches the host's loopback as the gateway 10.0.2.2; write --host-loopback --allow-net 10.0.2.2/32"},
		{[]string{"--network", "nat", "--allow-net", "10.0.2.2:80"}, "--allow-net: allow rule 10.0.2.2/32:80: the gateway forwards to the host's loopback only with --host-loopback; add it"},
		{[]string{"-p", "unix:" + long + ":80"}, "--publish unix:" + long + ":80: the path is 120 bytes, more than the 107 a unix socket's address holds (sun_path); pick a shorter path"},
		{[]string{"-p", "unix:/no/such/dir/s.sock:80"}, "--publish unix:/no/such/dir/s.sock:80: the directory /no/such/dir does not exist; create it"},
		{[]string{"-w", "rel/dir"}, `--workdir "rel/dir" is invalid, it needs to be an absolute path; give one such as /app`},
		{[]string{"-w", "/a/" + strings.Repeat("w", 256)}, "has a name of 256 bytes, more than the 255 Linux takes (NAME_MAX)"},
		{[]string{"-u", "a:b:c"}, `--user: user "a:b:c" has more than one ':'`},
		{[]string{"--hostname", "bad host"}, `--hostname: hostname "bad host" is not a valid host name`},
		{[]string{"--platform", "bogus"}, `--platform "bogus" is not a platform; use auto, systrap, kvm or ptrace`},
		{[]string{"--network", "bogus"}, `--network "bogus" is not a network mode; use "none" or "nat"`},
		{[]string{"--network", "host"}, "--network host: a sandbox never shares the host's network; use --network nat"},
		{[]string{"--network", "bridge"}, "use --network nat"},
		{[]string{"-p", "8080-8090:80"}, "one port per -p"},
		{[]string{"--mount", "src=v.ext4,dst=rel"}, `--mount src=v.ext4,dst=rel: dst "rel" must be an absolute path`},
		{[]string{"-e", "=x"}, `--env "=x": invalid environment variable: it has no name`},
	} {
		args := c.args
		if len(args) == 0 || args[len(args)-1] != "true" {
			args = append(args, "img")
		}
		err := cliError(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want an error saying %q", c.args, err, c.want)
		}
	}
}

// TestSpecFlagsCoverTheSpec: every field of spec.Sandbox has a flag (or
// an argument) of rungv run, which errors about the field name and --spec
// refuses.
func TestSpecFlagsCoverTheSpec(t *testing.T) {
	cmd := newRunCommand(&globalFlags{})
	typ := reflect.TypeOf(spec.Sandbox{})
	for i := range typ.NumField() {
		field, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		flag, ok := specFlags[field]
		switch {
		case !ok:
			t.Errorf("spec.Sandbox's %s has no flag in specFlags", field)
		case strings.HasPrefix(flag, "--") && cmd.Flags().Lookup(strings.TrimPrefix(flag, "--")) == nil:
			t.Errorf("specFlags names %s for %s, which rungv run does not have", flag, field)
		}
	}
	for field := range flagSays {
		if _, ok := specFlags[field]; !ok {
			t.Errorf("flagSays rewords %s, which is not a field", field)
		}
	}
}

// TestPidsLimitFlag: without --pids-limit a sandbox gets the default
// limit; 0 and -1 turn it off, as with docker run.
func TestPidsLimitFlag(t *testing.T) {
	for args, want := range map[string]int{"": 0, "--pids-limit=2048": 2048, "--pids-limit=100": 100, "--pids-limit=0": -1, "--pids-limit=-1": -1} {
		sp, _, err := parseRun(t, strings.Fields(args+" img")...)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := sentryConfig(&sp)
		if err != nil || cfg.PidsLimit != want {
			t.Errorf("%s: PidsLimit %d (%v), want %d", args, cfg.PidsLimit, err, want)
		}
	}
}

// TestDecodeSpecNamesTheField: a --spec whose JSON is wrong is refused
// naming the field, as the spec's JSON names it.
func TestDecodeSpecNamesTheField(t *testing.T) {
	for in, want := range map[string]string{
		`{"image": "x", "memroy": 1}`:                      "sandbox spec: memroy: is not a field of a sandbox spec",
		`{"image": "x", "ports": [{"guest_port": "80"}]}`:  "sandbox spec: ports.guest_port: is a JSON string; give a whole number that fits a uint16",
		`{"image": "x", "ports": [{"guest_port": 99999}]}`: "sandbox spec: ports.guest_port: is a JSON number 99999; give a whole number",
		`{"image": "x", "cmd": "echo hi"}`:                 "sandbox spec: cmd: is a JSON string; give a list",
		`{"image": "x", "keep_alive": 1}`:                  "sandbox spec: keep_alive: is a JSON number; give true or false",
		`{"image": "x", "timeout": "60"}`:                  "sandbox spec: timeout: is a JSON string; give a number",
		`{"image": "x"`:                                    "is not JSON",
		`{"image": "x"} {}`:                                "holds more than the spec's JSON object",
		``:                                                 "is empty; give the spec's JSON",
	} {
		_, err := decodeSpec([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error saying %q", in, err, want)
		}
	}
	var fe *spec.FieldError
	if _, err := decodeSpec([]byte(`{"image": "x", "cpus": "two"}`)); !errors.As(err, &fe) || fe.Field != "cpus" {
		t.Errorf("cpus as a string: %v; want a *spec.FieldError for cpus", err)
	}
}

// TestSpecHostChecksNameTheField: with --spec, what this host refuses is
// named by the spec's field, with the spec's value.
func TestSpecHostChecksNameTheField(t *testing.T) {
	long := "/tmp/" + strings.Repeat("x", 110) + ".sock"
	for _, c := range []struct {
		sp   spec.Sandbox
		want string
	}{
		{spec.Sandbox{CPUs: 30000}, "sandbox spec: cpus: 30000 is more than the 1024 CPUs"},
		{spec.Sandbox{Memory: 2 << 40}, "sandbox spec: memory: 2199023255552 is more than the maximum of 1 TiB"},
		{spec.Sandbox{CPUSet: []int{99999}}, "sandbox spec: cpuset: 99999 names CPU 99999, which this process may not run on"},
		{spec.Sandbox{Hostname: "a b"}, `sandbox spec: hostname: hostname "a b" is not a valid host name`},
		{spec.Sandbox{Workdir: "rel"}, `sandbox spec: workdir: "rel" is invalid, it needs to be an absolute path`},
		{spec.Sandbox{User: "a:b:c"}, `sandbox spec: user: user "a:b:c" has more than one ':'`},
		{spec.Sandbox{Network: spec.NetworkNAT, AllowNet: []string{"x", "10.0.0.0/8:70000"}}, `sandbox spec: allow_net[0]: "x" is not CIDR[:PORT]`},
		{spec.Sandbox{Network: spec.NetworkNAT, AllowNet: []string{"10.0.0.0/8:70000"}}, `sandbox spec: allow_net[0]: "10.0.0.0/8:70000" has port "70000", which must be 1-65535`},
		{spec.Sandbox{Ports: []spec.Port{{GuestPort: 80}, {HostPath: long, GuestPort: 80}}}, "sandbox spec: ports[1].host_path: the path is 120 bytes"},
		{spec.Sandbox{Ports: []spec.Port{{GuestPort: 0}}}, "sandbox spec: ports[0].guest_port: is 0"},
	} {
		c.sp.Image = "img"
		_, _, err := planSandbox(&c.sp, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error saying %q", c.sp, err, c.want)
		}
	}
}
