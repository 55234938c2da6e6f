package sentry

import (
	// The Linux system call table.
	_ "gvisor.dev/gvisor/pkg/sentry/syscalls/linux"

	// Socket families the guest may use: netstack (inet, inet6, packet),
	// unix, netlink with its route protocol and its netfilter protocol
	// (answers only with Config.NFTables).
	_ "gvisor.dev/gvisor/pkg/sentry/socket/netlink"
	_ "gvisor.dev/gvisor/pkg/sentry/socket/netlink/netfilter"
	_ "gvisor.dev/gvisor/pkg/sentry/socket/netlink/route"
	_ "gvisor.dev/gvisor/pkg/sentry/socket/netstack"
	_ "gvisor.dev/gvisor/pkg/sentry/socket/unix"
)
