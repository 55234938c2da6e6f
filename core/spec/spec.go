// Package spec describes a sandbox once: what it runs, its limits, its
// network and its storage, as one JSON-tagged type that every layer of gvx
// shares. Python builds its JSON, the C ABI decodes it, the Go SDK takes it
// and rungv's flags fill it; Validate checks it in one place, with errors
// that name the field as the JSON does.
//
// A Sandbox says what the sandbox is, not how a caller reaches it: the
// rungv binary, the image cache and the caller's streams belong to the
// caller's options, not here.
package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"time"
)

// Sandbox describes a sandbox. The zero value of every field but Image is
// the default: the image's own command, environment and user, no network
// but loopback, no limits but the default task limit.
type Sandbox struct {
	// Image is the image reference (a registry reference, oci:DIR[:TAG],
	// docker-archive:FILE); it is pulled into the cache if missing.
	Image string `json:"image"`
	// Entrypoint replaces the image's entrypoint when not nil; an empty
	// list means none.
	Entrypoint *[]string `json:"entrypoint,omitempty"`
	// Cmd replaces the image's Cmd.
	Cmd []string `json:"cmd,omitempty"`
	// Env adds or overrides environment variables, as "KEY=VALUE".
	Env []string `json:"env,omitempty"`
	// Workdir is the working directory; empty: the image's.
	Workdir string `json:"workdir,omitempty"`
	// User is name|uid[:group|gid]; empty: the image's.
	User string `json:"user,omitempty"`
	// Hostname is the sandbox's hostname; empty: one made from its id.
	Hostname string `json:"hostname,omitempty"`

	// KeepAlive runs a built-in idle init instead of a command, for
	// sandboxes driven through exec.
	KeepAlive bool `json:"keep_alive,omitempty"`
	// Restore continues the sandbox saved in this snapshot file instead of
	// starting a command. Image, Mounts (clones of the saved volumes) and
	// the network fields must be as when it was saved; Entrypoint, Cmd and
	// KeepAlive must be unset.
	Restore string `json:"restore,omitempty"`

	// Platform is how the Sentry intercepts the guest's system calls.
	Platform Platform `json:"platform,omitempty"`
	// Spin, when set, says whether systrap's threads spin while the guest
	// and the Sentry wait for each other; nil leaves it to the host's load
	// (the SDK's spin budget, see gvx.Config).
	Spin *bool `json:"spin,omitempty"`

	// Network is NetworkNone (empty) or NetworkNAT.
	Network NetworkMode `json:"network,omitempty"`
	// Ports are published on the host, in either network mode.
	Ports []Port `json:"ports,omitempty"`
	// AllowNet, with NetworkNAT, lists the only destinations the guest
	// may reach, as CIDR[:PORT] ("10.0.0.0/8", "192.0.2.1:443",
	// "[2001:db8::/32]:443"), named as the guest names them: the gateway
	// 10.0.2.2 stands for the host's loopback. Empty: everything.
	// Link-local addresses (cloud metadata) and the host's own addresses
	// stay refused either way unless a rule names them: a prefix inside
	// 169.254.0.0/16 or fe80::/10, or exactly the host's address; a
	// covering prefix (0.0.0.0/0, the host's subnet) does not. Refused
	// connections get a RST, refused UDP an ICMP port unreachable.
	AllowNet []string `json:"allow_net,omitempty"`
	// HostLoopback, with NetworkNAT, lets the gateway 10.0.2.2 reach the
	// host's 127.0.0.1 (port 53 stays the DNS relay).
	HostLoopback bool `json:"host_loopback,omitempty"`
	// NetRaw lets guest root open raw and packet sockets.
	NetRaw bool `json:"net_raw,omitempty"`
	// NFTables gives the sandbox gVisor's nftables (iptables-nft).
	// dockerd with its defaults (bridge network, iptables on) needs it
	// and NetRaw; the Docker-in-gvx image refuses to start without them.
	NFTables bool `json:"nftables,omitempty"`
	// AllowPacketSocketWrite lets packet sockets send, not only capture;
	// it needs NetRaw.
	AllowPacketSocketWrite bool `json:"allow_packet_socket_write,omitempty"`

	// AllowSUID honours set-user-ID and set-group-ID bits in the sandbox.
	AllowSUID bool `json:"allow_suid,omitempty"`
	// Mounts attach volumes.
	Mounts []Mount `json:"mounts,omitempty"`

	// Memory is the whole sandbox's memory in bytes; the guest's OOM
	// killer acts inside it. 0: no limit.
	Memory uint64 `json:"memory,omitempty"`
	// CPUs is the number of CPUs the guest sees (rounded up). 0: as many
	// as CPUSet names, else the host's.
	CPUs float64 `json:"cpus,omitempty"`
	// CPUSet lists the host CPUs the sandbox runs on (docker run
	// --cpuset-cpus). Pinning each sandbox of a fleet to its own CPU
	// shortens guest system calls and execs and keeps sandboxes out of
	// each other's caches. Empty: every CPU the caller may use.
	CPUSet []int `json:"cpuset,omitempty"`
	// PidsLimit caps the tasks (threads included) in the sandbox. 0: the
	// default (DefaultPidsLimit); -1: no limit.
	PidsLimit int `json:"pids_limit,omitempty"`
	// Timeout stops the sandbox after this long (wall clock). 0: never.
	Timeout Seconds `json:"timeout,omitempty"`
}

// DefaultPidsLimit is the task limit of a sandbox whose PidsLimit is 0.
const DefaultPidsLimit = 2048

// Platform selects how the Sentry intercepts guest system calls.
type Platform string

// Platforms.
const (
	PlatformAuto    Platform = ""        // systrap
	PlatformSystrap Platform = "systrap" // seccomp traps in ptraced stubs; no privilege needed
	PlatformKVM     Platform = "kvm"     // hardware virtualisation; needs access to /dev/kvm
	PlatformPtrace  Platform = "ptrace"  // PTRACE_SYSEMU; slow
)

// NetworkMode selects the sandbox's network.
type NetworkMode string

// Network modes.
const (
	// NetworkNone gives the sandbox loopback only.
	NetworkNone NetworkMode = "none"
	// NetworkNAT gives the sandbox eth0, 10.0.2.15/24, behind a
	// user-space NAT in rungv: the guest's TCP and UDP flows are dialed
	// as ordinary host sockets, DNS to the gateway 10.0.2.2 is relayed to
	// the host's resolvers, and /etc/resolv.conf is set to the gateway
	// unless the image names a real nameserver. No root, no host change.
	NetworkNAT NetworkMode = "nat"
)

// Port publishes a port of the sandbox on the host. Connections (or UDP
// datagrams) to the host side reach the guest's 127.0.0.1:GuestPort, so a
// guest service listening on 0.0.0.0 or 127.0.0.1 gets them, in either
// network mode; with NetworkNAT a TCP connection that loopback refuses is
// tried on eth0's 10.0.2.15 next.
type Port struct {
	// HostPath, if set, publishes on a unix socket at this host path
	// (the seed workflow: DOCKER_HOST=unix://HostPath); the guest side is
	// TCP. rungv creates it with mode 0600, refuses a path that exists,
	// and removes the socket when it ends, even by SIGKILL.
	HostPath string `json:"host_path,omitempty"`
	// HostIP is the host address to listen on; empty: 127.0.0.1.
	HostIP string `json:"host_ip,omitempty"`
	// HostPort is the host port; 0 lets the host pick a free one, which
	// the sandbox's info reports (what a fleet of sandboxes publishing
	// the same guest port wants).
	HostPort uint16 `json:"host_port,omitempty"`
	// GuestPort is the port in the sandbox.
	GuestPort uint16 `json:"guest_port"`
	// Protocol is "tcp" (or empty) or "udp".
	Protocol string `json:"protocol,omitempty"`
}

// MountType is the kind of a Mount.
type MountType string

// MountVolume is a single-file ext4 volume that the Sentry reads and
// writes itself.
const MountVolume MountType = "volume"

// Mount attaches the ext4 volume in the host file Source (an image or a
// clone, see `rungv volume`) at Target. A missing Source is created
// (16 GiB, sparse) unless ReadOnly. The sandbox writes the volume back and
// closes it cleanly when it stops; if its process is killed instead, the
// journal replays at the next mount.
type Mount struct {
	// Type is MountVolume (or empty, which means it).
	Type MountType `json:"type,omitempty"`
	// Source is the volume's host file.
	Source string `json:"source"`
	// Target is an absolute path in the sandbox.
	Target   string `json:"target"`
	ReadOnly bool   `json:"readonly,omitempty"`
}

// Seconds is a time.Duration that travels in JSON as a number of seconds,
// as Python gives durations.
type Seconds time.Duration

// MarshalJSON implements json.Marshaler.
func (s Seconds) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(s).Seconds())
}

// UnmarshalJSON implements json.Unmarshaler. A negative number stays
// negative, for Validate to name the field; one past time.Duration's
// range (about 292 years) is its maximum.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	var sec float64
	if err := json.Unmarshal(b, &sec); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			// A type error, which the decoder then names the field of
			// (as it does for a plain float64), where a wrapped one
			// would lose it.
			return &json.UnmarshalTypeError{Value: typeErr.Value, Type: reflect.TypeOf(sec)}
		}
		return fmt.Errorf("a duration is a number of seconds: %w", err)
	}
	switch d := sec * float64(time.Second); {
	case d >= math.MaxInt64:
		*s = math.MaxInt64
	case d <= math.MinInt64:
		*s = math.MinInt64
	default:
		*s = Seconds(d)
	}
	return nil
}
