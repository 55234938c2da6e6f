package spec

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheField(t *testing.T) {
	empty := []string{}
	for _, c := range []struct {
		name  string
		edit  func(*Sandbox)
		field string
		says  string
	}{
		{"no image", func(s *Sandbox) { s.Image = "" }, "image", "name an image"},
		{"keep-alive with a command", func(s *Sandbox) { s.KeepAlive, s.Cmd = true, []string{"true"} }, "keep_alive", "leave entrypoint and cmd unset"},
		{"restore with an entrypoint", func(s *Sandbox) { s.Restore, s.Entrypoint = "x.snap", &empty }, "restore", "snapshot's own init"},
		{"env without =", func(s *Sandbox) { s.Env = []string{"A=1", "B"} }, "env[1]", "not KEY=VALUE"},
		{"env without a name", func(s *Sandbox) { s.Env = []string{"=1"} }, "env[0]", "no name"},
		{"env with NUL", func(s *Sandbox) { s.Env = []string{"A=\x00"} }, "env[0]", "NUL"},
		{"platform", func(s *Sandbox) { s.Platform = "vmware" }, "platform", "auto, systrap, kvm or ptrace"},
		{"network", func(s *Sandbox) { s.Network = "host" }, "network", `"none" or "nat"`},
		{"allow_net without nat", func(s *Sandbox) { s.AllowNet = []string{"10.0.0.0/8"} }, "allow_net", `set network to "nat"`},
		{"host_loopback without nat", func(s *Sandbox) { s.HostLoopback = true }, "host_loopback", `set network to "nat"`},
		{"packet write without raw", func(s *Sandbox) { s.AllowPacketSocketWrite = true }, "allow_packet_socket_write", "needs net_raw"},
		{"port 0", func(s *Sandbox) { s.Ports = []Port{{GuestPort: 80}, {}} }, "ports[1].guest_port", "1-65535"},
		{"port protocol", func(s *Sandbox) { s.Ports = []Port{{GuestPort: 80, Protocol: "sctp"}} }, "ports[0].protocol", "tcp or udp"},
		{"unix socket with udp", func(s *Sandbox) { s.Ports = []Port{{GuestPort: 53, HostPath: "/tmp/s", Protocol: "udp"}} }, "ports[0].host_path", "carries TCP"},
		{"host ip", func(s *Sandbox) { s.Ports = []Port{{GuestPort: 80, HostIP: "localhost"}} }, "ports[0].host_ip", "not an IP address"},
		{"mount type", func(s *Sandbox) { s.Mounts = []Mount{{Type: "bind", Source: "/x", Target: "/x"}} }, "mounts[0].type", "only \"volume\""},
		{"mount source", func(s *Sandbox) { s.Mounts = []Mount{{Target: "/data"}} }, "mounts[0].source", "is empty"},
		{"mount target", func(s *Sandbox) { s.Mounts = []Mount{{Source: "v.ext4", Target: "data"}} }, "mounts[0].target", "not an absolute path"},
		{"cpus NaN", func(s *Sandbox) { s.CPUs = math.NaN() }, "cpus", "not a number of CPUs"},
		{"cpus negative", func(s *Sandbox) { s.CPUs = -1 }, "cpus", "not a number of CPUs"},
		{"cpuset", func(s *Sandbox) { s.CPUSet = []int{0, -2} }, "cpuset[1]", "numbered from 0"},
		{"pids_limit", func(s *Sandbox) { s.PidsLimit = -2 }, "pids_limit", "-1 for no limit"},
		{"timeout", func(s *Sandbox) { s.Timeout = Seconds(-time.Second) }, "timeout", "negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Sandbox{Image: "oci:./busybox:latest"}
			c.edit(&s)
			err := s.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v; want a *FieldError", err)
			}
			if fe.Field != c.field || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Validate() = %v (field %q); want field %q saying %q", err, fe.Field, c.field, c.says)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	s := Sandbox{Platform: "x", CPUs: -1}
	err := s.Validate()
	for _, field := range []string{"image:", "platform:", "cpus:"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %v; want it to name %s", err, field)
		}
	}
}

func TestAValidSpecPasses(t *testing.T) {
	empty := []string{}
	for _, s := range []Sandbox{
		{Image: "oci:./busybox:latest"},
		{Image: "busybox", Entrypoint: &empty, Cmd: []string{"sh"}, Env: []string{"A=", "B=x=y"}, Platform: "auto"},
		{Image: "busybox", KeepAlive: true, Network: NetworkNAT, AllowNet: []string{"10.0.0.0/8"}, HostLoopback: true, NetRaw: true, AllowPacketSocketWrite: true},
		{Image: "busybox", Restore: "ready.snap", Network: NetworkNone, Ports: []Port{{GuestPort: 2375, HostPath: "/tmp/d.sock"}, {GuestPort: 53, HostIP: "::1", Protocol: "udp"}}},
		{Image: "busybox", Mounts: []Mount{{Source: "v.ext4", Target: "/var/lib/docker"}}, CPUs: 0.5, CPUSet: []int{0}, PidsLimit: -1, Timeout: Seconds(time.Minute)},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v", s, err)
		}
	}
}

// TestJSONIsWhatPythonSends decodes the JSON gvx's Python package builds
// for a sandbox with every kind of field.
func TestJSONIsWhatPythonSends(t *testing.T) {
	const fromPython = `{"image": "oci:/img:latest", "entrypoint": [], "cmd": ["sh", "-c", "true"],
		"env": ["A=1"], "workdir": "/w", "user": "1000:1000", "hostname": "h", "keep_alive": false,
		"platform": "systrap", "spin": false, "network": "nat", "ports": [{"host_ip": "127.0.0.1", "host_port": 0, "guest_port": 80, "protocol": "tcp"}],
		"allow_net": ["10.0.0.0/8"], "host_loopback": true, "net_raw": true, "nftables": true,
		"mounts": [{"type": "volume", "source": "/v.ext4", "target": "/data", "readonly": true}],
		"memory": 536870912, "cpus": 1.5, "cpuset": [0, 1], "pids_limit": 100, "timeout": 2.5}`
	var s Sandbox
	dec := json.NewDecoder(strings.NewReader(fromPython))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatal(err)
	}
	no, empty := false, []string{}
	want := Sandbox{
		Image: "oci:/img:latest", Entrypoint: &empty, Cmd: []string{"sh", "-c", "true"}, Env: []string{"A=1"},
		Workdir: "/w", User: "1000:1000", Hostname: "h", Platform: PlatformSystrap, Spin: &no, Network: NetworkNAT,
		Ports:    []Port{{HostIP: "127.0.0.1", GuestPort: 80, Protocol: "tcp"}},
		AllowNet: []string{"10.0.0.0/8"}, HostLoopback: true, NetRaw: true, NFTables: true,
		Mounts: []Mount{{Type: MountVolume, Source: "/v.ext4", Target: "/data", ReadOnly: true}},
		Memory: 512 << 20, CPUs: 1.5, CPUSet: []int{0, 1}, PidsLimit: 100, Timeout: Seconds(2500 * time.Millisecond),
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", s, want)
	}
	if err := s.Validate(); err != nil {
		t.Error(err)
	}
	// And back: the same JSON, field for field.
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var again Sandbox
	if err := json.Unmarshal(b, &again); err != nil || !reflect.DeepEqual(again, want) {
		t.Errorf("round trip: %s -> %+v, %v", b, again, err)
	}
}

func TestSecondsFromJSON(t *testing.T) {
	var s Seconds
	if err := json.Unmarshal([]byte(`"10s"`), &s); err == nil {
		t.Errorf(`Seconds from "10s" = %v; want an error`, time.Duration(s))
	}
	for in, want := range map[string]time.Duration{`0.001`: time.Millisecond, `1e300`: math.MaxInt64, `-1e300`: math.MinInt64, `-1`: -time.Second} {
		if err := json.Unmarshal([]byte(in), &s); err != nil || time.Duration(s) != want {
			t.Errorf("Seconds from %s = %v, %v; want %v", in, time.Duration(s), err, want)
		}
	}
	// A negative one is Validate's to name.
	sb := Sandbox{Image: "busybox"}
	if err := json.Unmarshal([]byte(`{"image": "busybox", "timeout": -1}`), &sb); err != nil {
		t.Fatal(err)
	}
	if err := sb.Validate(); err == nil || !strings.Contains(err.Error(), "timeout: -1s is negative") {
		t.Errorf("Validate() = %v; want it to name the negative timeout", err)
	}
}
