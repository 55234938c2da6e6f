package main

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/spec"
)

// defaultVolumeSize is the size of a volume `rungv run --mount` creates
// for a missing src. The file is sparse: it takes space as it fills.
const defaultVolumeSize = 16 << 30

const mountUsage = "attach an ext4 volume: type=volume,src=FILE.ext4,dst=/PATH[,readonly] (a missing FILE is created: 16G, sparse)"

// addMountFlags registers --mount.
func addMountFlags(fl *pflag.FlagSet, mounts *[]string) {
	fl.StringArrayVar(mounts, "mount", nil, mountUsage)
}

// parseMount parses one --mount value, with docker's keys and aliases.
// Only type=volume exists: single-file ext4 volumes (images or clones made
// with `rungv volume clone`).
func parseMount(s string) (spec.Mount, error) {
	v := spec.Mount{Type: spec.MountVolume}
	typ := "volume"
	for _, field := range strings.Split(s, ",") {
		key, val, hasVal := strings.Cut(strings.TrimSpace(field), "=")
		switch strings.ToLower(key) {
		case "type":
			typ = val
		case "src", "source":
			v.Source = val
		case "dst", "destination", "target":
			v.Target = val
		case "readonly", "ro":
			ro := true
			if hasVal {
				b, err := strconv.ParseBool(val)
				if err != nil {
					return v, fmt.Errorf("readonly=%q: want true or false", val)
				}
				ro = b
			}
			v.ReadOnly = ro
		case "":
		default:
			return v, fmt.Errorf("unknown key %q; use type, src, dst and readonly", key)
		}
	}
	if typ != "volume" {
		return v, fmt.Errorf("type=%s is not supported; use type=volume (a single-file ext4 volume)", typ)
	}
	if v.Source == "" {
		return v, errors.New("src is missing: name the volume file, e.g. src=data.ext4")
	}
	if v.Target == "" || !path.IsAbs(v.Target) {
		return v, fmt.Errorf("dst %q must be an absolute path in the sandbox", v.Target)
	}
	v.Target = path.Clean(v.Target)
	return v, nil
}
