#!/bin/sh
# gvx-snapshot: the snapshot hook of gvx's Docker image (the image's
# dev.gfire.gvx.snapshot-hook label names it). A gvx snapshot keeps
# dockerd, containerd and their memory and files, but a restored sandbox's
# network stack starts with only the interfaces rungv gives it and no
# netfilter rules. dockerd made the docker0 bridge (and other networks'
# bridges) and its iptables rules at start and will not make them again, so:
#
#   gvx-snapshot save     prints a shell script that re-creates the bridges
#                         with their addresses and restores the rules;
#   gvx-snapshot restore  runs that script from stdin, right after a restore.
set -eu

case "${1:-}" in
save)
	for dev in $(ip -o link show type bridge | awk -F': ' '{print $2}' | cut -d@ -f1); do
		mtu=$(cat "/sys/class/net/$dev/mtu" 2>/dev/null || ip -o link show dev "$dev" | sed -n 's/.* mtu \([0-9]*\).*/\1/p')
		echo "ip link add $dev type bridge"
		[ -n "$mtu" ] && echo "ip link set $dev mtu $mtu"
		ip -o addr show dev "$dev" | awk -v dev="$dev" '$3 == "inet" || $3 == "inet6" { print "ip addr add " $4 " dev " dev }' | grep -v ' fe80:' || true
		if ip -o link show dev "$dev" | grep -q '[<,]UP[,>]'; then
			echo "ip link set $dev up"
		fi
	done
	for t in iptables ip6tables; do
		rules=$($t-save 2>/dev/null || true)
		# A table with only its built-in chains and no rules is the default.
		if printf '%s\n' "$rules" | grep -q '^-A \|^:[A-Z-]* - '; then
			echo "$t-restore <<'GVX_RULES'"
			printf '%s\n' "$rules"
			echo "GVX_RULES"
		fi
	done
	;;
restore)
	exec sh -eu -s
	;;
*)
	echo "usage: gvx-snapshot save|restore" >&2
	exit 2
	;;
esac
