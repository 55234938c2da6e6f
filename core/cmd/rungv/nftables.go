package main

import "github.com/spf13/pflag"

// addNFTablesFlag registers `rungv run --nftables`.
//
// It is a flag of its own, not implied by --net-raw: gVisor's nftables is
// switched on for the whole rungv process, gVisor marks it as not yet
// thread-safe, and raw sockets are useful without it (ping). Docker inside
// the sandbox needs both: `--nftables --net-raw`. Without nftables
// dockerd's iptables-nft finds no nf_tables and the legacy iptables gVisor
// has lacks MASQUERADE, conntrack and addrtype, so dockerd cannot start
// with its default bridge network. An image that needs both says so with
// its image.NeedsLabel, which `rungv run IMAGE` honours (needsPolicy), and
// a command that runs dockerd without nftables is refused before the
// sandbox boots (checkDockerd).
func addNFTablesFlag(fl *pflag.FlagSet, on *bool) {
	fl.BoolVar(on, "nftables", false, "give the sandbox gVisor's nftables (iptables-nft, Docker's bridge network and port publishing need it, with --net-raw; an image labelled dev.gfire.gvx.needs=nftables gets it unless --nftables=false)")
}
