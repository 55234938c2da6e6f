package image

import (
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Config is the part of an image's configuration a sandbox runs with.
type Config struct {
	Entrypoint   []string          `json:"Entrypoint,omitempty"`
	Cmd          []string          `json:"Cmd,omitempty"`
	Env          []string          `json:"Env,omitempty"`
	WorkingDir   string            `json:"WorkingDir,omitempty"`
	User         string            `json:"User,omitempty"`
	ExposedPorts []string          `json:"ExposedPorts,omitempty"`
	Volumes      []string          `json:"Volumes,omitempty"`
	Labels       map[string]string `json:"Labels,omitempty"`
	StopSignal   string            `json:"StopSignal,omitempty"`
}

// SnapshotHookLabel names, in an image's labels, an executable in the
// image that carries guest state a gvx snapshot cannot: gVisor's snapshot
// keeps processes, memory and files, but the network interfaces the
// guest made (a Docker bridge) and its netfilter rules start afresh in a
// restored sandbox. rungv runs `HOOK save` in the guest, as root, before a
// checkpoint; what it prints travels inside the snapshot and is the stdin
// of `HOOK restore`, run right after a restore, before the sandbox's
// control endpoint answers.
const SnapshotHookLabel = "dev.gfire.gvx.snapshot-hook"

// NeedsLabel names, in an image's labels, the sandbox features the image
// cannot run without, as the `rungv run` flags that turn them on, less
// their dashes and separated by commas: "nftables,net-raw" for gvx's
// Docker image, whose dockerd programs its bridge network with
// iptables-nft. `rungv run IMAGE` turns them on and says so, unless the
// command line turns one off by name (--nftables=false); the SDKs, whose
// spec says in full what a sandbox may do, do not read it.
const NeedsLabel = "dev.gfire.gvx.needs"

// ConfigFrom extracts the runtime configuration of an image config file.
func ConfigFrom(cf *v1.ConfigFile) Config {
	c := cf.Config
	return Config{
		Entrypoint:   c.Entrypoint,
		Cmd:          c.Cmd,
		Env:          c.Env,
		WorkingDir:   c.WorkingDir,
		User:         c.User,
		ExposedPorts: sortedKeys(c.ExposedPorts),
		Volumes:      sortedKeys(c.Volumes),
		Labels:       c.Labels,
		StopSignal:   c.StopSignal,
	}
}

func sortedKeys(m map[string]struct{}) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
