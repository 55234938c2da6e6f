package lockdown

import (
	"fmt"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/seccomp"
)

// NetAccess is what a locked-down process may still do with host sockets,
// beyond the control socket. Each level includes the one before it.
type NetAccess int

const (
	// NetNone allows no host socket use: the sandbox's network lives
	// entirely in memory. It is the default.
	NetNone NetAccess = iota
	// NetPublish allows accepting connections on listening sockets that
	// were opened before lockdown, and relaying data on them (published
	// ports: TCP, UDP and unix sockets). No socket can be created.
	NetPublish
	// NetNAT also allows creating TCP and UDP sockets over IPv4 and IPv6
	// and connecting them (the user-space NAT dials the guest's flows as
	// ordinary host sockets). No other socket family or type, no bind and
	// no listen.
	NetNAT
)

// String implements fmt.Stringer.
func (a NetAccess) String() string {
	switch a {
	case NetNone:
		return "none"
	case NetPublish:
		return "publish"
	case NetNAT:
		return "nat"
	}
	return fmt.Sprintf("NetAccess(%d)", int(a))
}

// valid reports whether a is one of the defined levels.
func (a NetAccess) valid() bool { return a >= NetNone && a <= NetNAT }

// netRulesVersion changes whenever netRules changes shape, so precompiled
// programs built from older rules are not used.
const netRulesVersion = 1

// Go's net package opens every socket non-blocking and close-on-exec.
const goSockFlags = unix.SOCK_NONBLOCK | unix.SOCK_CLOEXEC

// netRules returns the system calls host sockets need at access level a,
// beyond gVisor's list (which already has read, write, close, shutdown,
// epoll and getsockopt(SO_ERROR)).
//
// NetPublish (published ports; the listeners exist before lockdown):
//
//   - accept4 with Go's flags: taking connections off the listeners.
//     Without listen or bind on the list, only sockets opened before
//     lockdown can be listening.
//   - getsockname, getpeername: Go names both ends of every accepted or
//     connected socket.
//   - setsockopt(IPPROTO_TCP, TCP_NODELAY): Go sets it on every TCP
//     connection. gvx turns Go's keep-alive defaults off, so nothing else.
//   - recvfrom, sendto without flags: a published UDP port reads each
//     datagram with its sender and answers it.
//
// NetNAT adds:
//
//   - socket(AF_INET or AF_INET6, SOCK_STREAM or SOCK_DGRAM, 0): the NAT's
//     outgoing flows and the DNS forwarder. No AF_UNIX, AF_NETLINK,
//     AF_PACKET or raw sockets.
//   - connect: the destination is behind a pointer that seccomp cannot
//     read; the NAT's policy decides it before the call.
//   - setsockopt(SOL_SOCKET, SO_BROADCAST) and
//     setsockopt(IPPROTO_IPV6, IPV6_V6ONLY): Go sets them on new UDP and
//     IPv6 sockets.
func netRules(a NetAccess) seccomp.SyscallRules {
	r := seccomp.NewSyscallRules()
	if a < NetPublish {
		return r
	}
	r.Set(unix.SYS_ACCEPT4, seccomp.PerArg{
		seccomp.NonNegativeFD{},
		seccomp.AnyValue{},
		seccomp.AnyValue{},
		seccomp.EqualTo(goSockFlags),
	})
	r.Set(unix.SYS_GETSOCKNAME, seccomp.MatchAll{})
	r.Set(unix.SYS_GETPEERNAME, seccomp.MatchAll{})
	sockopts := seccomp.Or{sockopt(unix.IPPROTO_TCP, unix.TCP_NODELAY)}
	r.Set(unix.SYS_RECVFROM, seccomp.PerArg{
		seccomp.NonNegativeFD{},
		seccomp.AnyValue{},
		seccomp.AnyValue{},
		seccomp.EqualTo(0),
	})
	r.Set(unix.SYS_SENDTO, seccomp.PerArg{
		seccomp.NonNegativeFD{},
		seccomp.AnyValue{},
		seccomp.AnyValue{},
		seccomp.EqualTo(0),
	})
	if a >= NetNAT {
		var sockets seccomp.Or
		for _, domain := range []uintptr{unix.AF_INET, unix.AF_INET6} {
			for _, typ := range []uintptr{unix.SOCK_STREAM, unix.SOCK_DGRAM} {
				sockets = append(sockets, seccomp.PerArg{
					seccomp.EqualTo(domain),
					seccomp.EqualTo(typ | goSockFlags),
					seccomp.EqualTo(0),
				})
			}
		}
		r.Set(unix.SYS_SOCKET, sockets)
		r.Set(unix.SYS_CONNECT, seccomp.PerArg{seccomp.NonNegativeFD{}})
		sockopts = append(sockopts,
			sockopt(unix.SOL_SOCKET, unix.SO_BROADCAST),
			sockopt(unix.IPPROTO_IPV6, unix.IPV6_V6ONLY))
	}
	r.Set(unix.SYS_SETSOCKOPT, sockopts)
	return r
}

// sockopt matches setsockopt(fd, level, name, &int, sizeof(int)).
func sockopt(level, name uintptr) seccomp.PerArg {
	return seccomp.PerArg{
		seccomp.NonNegativeFD{},
		seccomp.EqualTo(level),
		seccomp.EqualTo(name),
		seccomp.AnyValue{},
		seccomp.EqualTo(4),
	}
}
