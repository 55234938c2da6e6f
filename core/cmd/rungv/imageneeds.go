package main

import (
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/sentry"
	"z.gfire.dev/gvx/core/spec"
)

// imageFeatures are the features an image may ask for with
// image.NeedsLabel, by the flag that turns each on. Both are features
// of the Sentry's own network stack: they widen what guest root may ask
// of the Sentry, never what rungv may do on the host. Others (volumes,
// --network nat, --allow-suid) reach outside the sandbox or undo a
// default the user relies on, and only the command line gives them.
var imageFeatures = map[string]func(sp *spec.Sandbox, cfg *sentry.Config) *bool{
	"nftables": func(sp *spec.Sandbox, cfg *sentry.Config) *bool { sp.NFTables = true; return &cfg.NFTables },
	"net-raw":  func(sp *spec.Sandbox, cfg *sentry.Config) *bool { sp.NetRaw = true; return &cfg.NetRaw },
}

// needsPolicy is how `rungv run` without --spec treats an image's
// image.NeedsLabel: it turns on the features the label names, except
// those the command line turned off by name (--nftables=false). With
// --spec it is nil: a spec says in full what its sandbox may do.
//
// Why a label and not defaults: nftables is process-wide in gVisor and
// not yet thread-safe there, and raw sockets let guest root build any
// packet the Sentry's stack then parses; each widens what the guest can
// reach of the Sentry, so sandboxes that do not need them stay without.
// An image that cannot start without them (dockerd with its defaults)
// says so, and the user sees it on stderr.
type needsPolicy struct {
	refused map[string]bool
}

// newNeedsPolicy reads which features fl turned off by name.
func newNeedsPolicy(fl *pflag.FlagSet) *needsPolicy {
	p := &needsPolicy{refused: map[string]bool{}}
	for name := range imageFeatures {
		if f := fl.Lookup(name); f != nil && f.Changed && f.Value.String() == "false" {
			p.refused[name] = true
		}
	}
	return p
}

// apply turns on, in sp and cfg, the features the image's labels ask
// for, and says on w what it did.
func (p *needsPolicy) apply(w io.Writer, labels map[string]string, sp *spec.Sandbox, cfg *sentry.Config) {
	value, ok := labels[image.NeedsLabel]
	if p == nil || !ok {
		return
	}
	var on, off, unknown []string
	for _, name := range strings.FieldsFunc(value, func(r rune) bool { return r == ',' || r == ' ' }) {
		feature, ok := imageFeatures[name]
		switch {
		case !ok:
			unknown = append(unknown, name)
		case p.refused[name]:
			off = append(off, "--"+name)
		default:
			if flag := feature(sp, cfg); !*flag {
				*flag = true
				on = append(on, "--"+name)
			}
		}
	}
	label := fmt.Sprintf("label %s=%q", image.NeedsLabel, value)
	if len(on) > 0 {
		fmt.Fprintf(w, "rungv: the image needs %s (%s): turned on; %s=false refuses\n", strings.Join(on, " "), label, strings.Join(on, "=false "))
	}
	if len(off) > 0 {
		fmt.Fprintf(w, "rungv: the image needs %s (%s), which the command line turns off: it may fail to start\n", strings.Join(off, " "), label)
	}
	if len(unknown) > 0 {
		fmt.Fprintf(w, "rungv: the image's %s names %s, which this rungv does not know: ignored\n", label, strings.Join(unknown, ", "))
	}
}

// dockerdPrograms start dockerd with its defaults: Docker's own, the
// docker:dind image's entrypoint, and gvx's Docker image's entrypoint.
var dockerdPrograms = map[string]bool{"dockerd": true, "dockerd-entrypoint.sh": true, "gvx-dockerd": true}

// initWrappers run the rest of their command line as their child.
var initWrappers = map[string]bool{"tini": true, "tini-static": true, "docker-init": true, "dumb-init": true}

// checkDockerd refuses, before the sandbox boots, a command that starts
// dockerd with its bridge network where the Sentry has no nftables
// (argv is the command, which runs dockerd after any init wrapper): its
// iptables-nft finds no nf_tables, gVisor's legacy iptables has no
// MASQUERADE, and dockerd dies with "iptables: Failed to initialize nft:
// Protocol not supported", which names neither cause nor cure. A dockerd
// told --iptables=false needs neither and runs.
func checkDockerd(argv []string, nftables, fromSpec bool) error {
	if nftables {
		return nil
	}
	prog := ""
	for i, a := range argv {
		if prog == "" && (strings.HasPrefix(a, "-") || initWrappers[path.Base(a)]) {
			continue
		}
		if prog == "" {
			prog = a
		}
		if a == "--iptables=false" || a == "--iptables" && i+1 < len(argv) && argv[i+1] == "false" {
			return nil
		}
	}
	if !dockerdPrograms[path.Base(prog)] {
		return nil
	}
	add := "add --nftables --net-raw"
	if fromSpec {
		add = `set "nftables": true and "net_raw": true in the spec`
	}
	err := fmt.Sprintf("the command runs %s, and dockerd's bridge network needs gVisor's nftables and raw sockets in the sandbox, which are off (without them dockerd dies with \"iptables: Failed to initialize nft: Protocol not supported\"): %s, or give dockerd --iptables=false for no bridge network", prog, add)
	if path.Base(prog) != "gvx-dockerd" {
		// Else the next start fails on "Devices cgroup isn't mounted".
		err += "; dockerd also needs the cgroup v1 controllers mounted under /sys/fs/cgroup before it starts, which rungv does not do and gvx's Docker image's entrypoint does (README, \"Docker inside\")"
	}
	return errors.New(err)
}
