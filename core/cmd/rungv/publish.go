package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"z.gfire.dev/gvx/core/spec"
)

// parsePublish parses -p: unix:HOSTPATH:GUESTPORT or
// [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp], IP defaulting to 127.0.0.1 (an IPv6
// address goes in brackets) and a missing or 0 HOSTPORT meaning one the
// host picks. The host path is checked later, with the spec's ports.
func parsePublish(s string) (spec.Port, error) {
	var p spec.Port
	if rest, ok := strings.CutPrefix(s, "unix:"); ok {
		i := strings.LastIndex(rest, ":")
		if i <= 0 {
			return p, fmt.Errorf("-p %s: write unix:HOSTPATH:GUESTPORT, e.g. -p unix:/tmp/docker.sock:2375", s)
		}
		path, guest := rest[:i], rest[i+1:]
		if strings.HasSuffix(guest, "/udp") {
			return p, fmt.Errorf("-p %s: a unix socket carries TCP only; drop /udp", s)
		}
		port, err := parsePort(strings.TrimSuffix(guest, "/tcp"))
		if err != nil {
			return p, fmt.Errorf("-p %s: guest port: %w", s, err)
		}
		return spec.Port{HostPath: path, GuestPort: port}, nil
	}
	addr, proto, hasProto := strings.Cut(s, "/")
	if hasProto {
		switch proto {
		case "tcp":
		case "udp":
			p.Protocol = "udp"
		default:
			return p, fmt.Errorf("-p %s: protocol %q: use /tcp or /udp", s, proto)
		}
	}
	var hostPort, guestPort string
	if strings.HasPrefix(addr, "[") {
		end := strings.Index(addr, "]:")
		if end < 0 {
			return p, fmt.Errorf("-p %s: write [IPV6]:HOSTPORT:GUESTPORT, e.g. -p [::1]:8080:80", s)
		}
		p.HostIP = addr[1:end]
		addr = addr[end+2:]
	}
	parts := strings.Split(addr, ":")
	switch {
	case len(parts) == 2:
		hostPort, guestPort = parts[0], parts[1]
	case len(parts) == 3 && !strings.HasPrefix(s, "["):
		p.HostIP, hostPort, guestPort = parts[0], parts[1], parts[2]
	case len(parts) == 1 && !strings.HasPrefix(s, "["):
		// -p GUESTPORT, as docker takes it: a host port the host chooses.
		guestPort = parts[0]
	default:
		return p, fmt.Errorf("-p %s: write [IP:][HOSTPORT:]GUESTPORT[/tcp|/udp] or unix:HOSTPATH:GUESTPORT", s)
	}
	if p.HostIP != "" {
		if _, err := netip.ParseAddr(p.HostIP); err != nil {
			return p, fmt.Errorf("-p %s: host address %q: give an IP address, e.g. 127.0.0.1", s, p.HostIP)
		}
	}
	var err error
	if hostPort != "" && hostPort != "0" {
		// Empty or 0: the host chooses (the sandbox's info and, unless
		// -q, stderr say which).
		if p.HostPort, err = parsePort(hostPort); err != nil {
			return p, fmt.Errorf("-p %s: host port: %w", s, err)
		}
	}
	if p.GuestPort, err = parsePort(guestPort); err != nil {
		return p, fmt.Errorf("-p %s: guest port: %w", s, err)
	}
	return p, nil
}

func parsePort(s string) (uint16, error) {
	if strings.Contains(s, "-") {
		return 0, fmt.Errorf("%q: port ranges are not supported; publish one port per -p", s)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%q: want a port number 1-65535", s)
	}
	return uint16(n), nil
}
