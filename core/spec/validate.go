package spec

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"path"
	"strings"
	"time"
)

// FieldError is a problem with one field of a Sandbox or an Exec, named
// as its JSON names it ("ports[1].guest_port").
type FieldError struct {
	// Spec is the spec the field belongs to: "exec", or "sandbox" when
	// empty.
	Spec  string
	Field string
	// Problem says what is wrong and what to give instead.
	Problem string
}

// Error implements error.
func (e *FieldError) Error() string {
	of := e.Spec
	if of == "" {
		of = "sandbox"
	}
	return fmt.Sprintf("%s spec: %s: %s", of, e.Field, e.Problem)
}

// Validate checks s as a whole, without the host: what every sandbox on
// any host needs. It returns every problem it finds, each a *FieldError
// (errors.As finds the first), joined.
func (s *Sandbox) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
	}
	if s.Image == "" {
		bad("image", "is empty; name an image, such as oci:./busybox:latest or docker.io/library/python:3.12")
	}
	if s.KeepAlive && (s.Entrypoint != nil || len(s.Cmd) > 0) {
		bad("keep_alive", "runs an idle init; leave entrypoint and cmd unset")
	}
	if s.Restore != "" && (s.KeepAlive || s.Entrypoint != nil || len(s.Cmd) > 0) {
		bad("restore", "continues the snapshot's own init; leave entrypoint, cmd and keep_alive unset")
	}
	for i, e := range s.Env {
		name, _, ok := strings.Cut(e, "=")
		switch {
		case !ok:
			bad(fmt.Sprintf("env[%d]", i), "%q is not KEY=VALUE", e)
		case name == "":
			bad(fmt.Sprintf("env[%d]", i), "%q has no name before '='; write KEY=VALUE", e)
		case strings.ContainsRune(e, 0):
			bad(fmt.Sprintf("env[%d]", i), "%q holds a NUL character, which an environment cannot carry", e)
		}
	}
	switch s.Platform {
	case PlatformAuto, "auto", PlatformSystrap, PlatformKVM, PlatformPtrace:
	default:
		bad("platform", "%q is not a platform; use auto, systrap, kvm or ptrace", s.Platform)
	}
	s.validateNetwork(bad)
	for i, m := range s.Mounts {
		field := fmt.Sprintf("mounts[%d]", i)
		switch {
		case m.Type != "" && m.Type != MountVolume:
			bad(field+".type", "%q is not a mount type; only %q (a single-file ext4 image) is supported", m.Type, MountVolume)
		case m.Source == "":
			bad(field+".source", "is empty; name the volume's host file")
		case !path.IsAbs(m.Target):
			bad(field+".target", "%q is not an absolute path in the sandbox", m.Target)
		}
	}
	if math.IsNaN(s.CPUs) || math.IsInf(s.CPUs, 0) || s.CPUs < 0 {
		bad("cpus", "%v is not a number of CPUs; give a positive number such as 2 or 0.5, or 0 for the host's", s.CPUs)
	}
	for i, cpu := range s.CPUSet {
		if cpu < 0 {
			bad(fmt.Sprintf("cpuset[%d]", i), "%d is not a CPU; host CPUs are numbered from 0", cpu)
		}
	}
	if s.PidsLimit < -1 {
		bad("pids_limit", "%d is negative; give a count of tasks, 0 for the default (%d) or -1 for no limit", s.PidsLimit, DefaultPidsLimit)
	}
	if s.Timeout < 0 {
		bad("timeout", "%v is negative; give a duration, or 0 for none", time.Duration(s.Timeout))
	}
	return errors.Join(errs...)
}

// validateNetwork checks the network fields.
func (s *Sandbox) validateNetwork(bad func(field, format string, args ...any)) {
	switch s.Network {
	case "", NetworkNone:
		if len(s.AllowNet) > 0 {
			bad("allow_net", "restricts the NAT, which this sandbox does not have; set network to %q", NetworkNAT)
		}
		if s.HostLoopback {
			bad("host_loopback", "opens the NAT's gateway, which this sandbox does not have; set network to %q", NetworkNAT)
		}
	case NetworkNAT:
	default:
		bad("network", "%q is not a network mode; use %q or %q", s.Network, NetworkNone, NetworkNAT)
	}
	if s.AllowPacketSocketWrite && !s.NetRaw {
		bad("allow_packet_socket_write", "needs net_raw; set it too")
	}
	for i, p := range s.Ports {
		field := fmt.Sprintf("ports[%d]", i)
		if p.GuestPort == 0 {
			bad(field+".guest_port", "is 0; give the port in the sandbox, 1-65535")
		}
		if p.Protocol != "" && p.Protocol != "tcp" && p.Protocol != "udp" {
			bad(field+".protocol", "%q is not a protocol; use tcp or udp", p.Protocol)
		}
		if p.HostPath != "" {
			if p.Protocol == "udp" || p.HostIP != "" || p.HostPort != 0 {
				bad(field+".host_path", "a unix socket carries TCP and takes no host_ip, host_port or udp")
			}
			continue
		}
		if p.HostIP != "" {
			if _, err := netip.ParseAddr(p.HostIP); err != nil {
				bad(field+".host_ip", "%q is not an IP address; give one such as 127.0.0.1 or ::1", p.HostIP)
			}
		}
	}
}
