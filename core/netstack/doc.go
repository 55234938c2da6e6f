// Package netstack gives a sandbox its network, in memory and inside the
// rungv process: no TAP device, no root, no namespace and no change to the
// host.
//
// The guest's own gVisor stack (the Sentry's) gets `eth0`, 10.0.2.15/24
// with the gateway 10.0.2.2 (the addresses QEMU's and slirp4netns's user
// networking use). In ModeNAT the other end of eth0 is a second gVisor
// stack owned by this package, the NAT stack: it accepts every packet the
// guest sends (promiscuous, spoofing), terminates the guest's TCP
// connections and UDP flows with gVisor's transport forwarders, and dials
// each one again as an ordinary host socket, after a Policy allowed it.
// DNS queries to the gateway are relayed to the host's resolvers; the
// gateway itself stands for the host's loopback only when
// Config.HostLoopback says so. Refused TCP connections get a RST and
// refused UDP datagrams an ICMP port unreachable at once.
//
// Why a second stack rather than a link endpoint that rewrites packets: a
// host socket is a byte stream (TCP) or a datagram socket, never a packet
// pipe, so the guest's TCP must be terminated somewhere — by a TCP
// implementation with flow control, retransmission and window scaling.
// gVisor's is already linked in; its forwarders hand over each new flow
// with its full 4-tuple, and a refused SYN costs nothing but a RST.
//
// Published ports (Config.Publish) are host listeners opened by New,
// before the process locks itself down; each accepted connection or UDP
// peer is relayed to the guest's loopback (127.0.0.1:GUESTPORT) through the
// guest's stack directly, so publishing works in ModeNone too and costs one
// stack traversal, not two. A TCP connection the loopback refuses is tried
// on eth0's address next (services bound to 10.0.2.15 only, DNAT rules
// that skip loopback). The guest sees such connections come from its own
// address, as behind Docker's userland proxy or RootlessKit's port driver.
//
// Use, in a process that hosts one sandbox (rungv):
//
//	n, err := netstack.New(netstack.Config{Mode: netstack.ModeNAT, ...}) // before lockdown
//	defer n.Close()
//	sb, err := sentry.New(sentry.Config{ConfigureNetwork: n.Attach, Lockdown: lockdown.Options{Net: n.LockdownNet()}, ...})
//	content, ok := netstack.GuestResolvConf(current, exists) // and write it before Start
package netstack

//go:generate go run z.gfire.dev/gvx/core/internal/stategen
