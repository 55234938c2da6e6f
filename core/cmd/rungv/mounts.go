package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/core/sentry"
)

// defaultVolumeSize is the size of a volume `rungv run --mount` creates
// for a missing src. The file is sparse: it takes space as it fills.
const defaultVolumeSize = 16 << 30

const mountUsage = "attach an ext4 volume: type=volume,src=FILE.ext4,dst=/PATH[,readonly] (a missing FILE is created: 16G, sparse)"

// addMountFlags registers --mount.
func addMountFlags(fl *pflag.FlagSet, mounts *[]string) {
	fl.StringArrayVar(mounts, "mount", nil, mountUsage)
}

// parseMounts turns --mount values into sentry volumes. Only type=volume
// exists: single-file ext4 volumes (images or clones made with `rungv
// volume clone`).
func parseMounts(specs []string) ([]sentry.Volume, error) {
	var vols []sentry.Volume
	for _, s := range specs {
		v, err := parseMount(s)
		if err != nil {
			return nil, fmt.Errorf("--mount %s: %w", s, err)
		}
		vols = append(vols, v)
	}
	return vols, nil
}

// parseMount parses one --mount value, with docker's keys and aliases.
func parseMount(spec string) (sentry.Volume, error) {
	var v sentry.Volume
	typ := "volume"
	for _, field := range strings.Split(spec, ",") {
		key, val, hasVal := strings.Cut(strings.TrimSpace(field), "=")
		switch strings.ToLower(key) {
		case "type":
			typ = val
		case "src", "source":
			v.Path = val
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
	if v.Path == "" {
		return v, errors.New("src is missing: name the volume file, e.g. src=data.ext4")
	}
	if v.Target == "" || !path.IsAbs(v.Target) {
		return v, fmt.Errorf("dst %q must be an absolute path in the sandbox", v.Target)
	}
	v.Target = path.Clean(v.Target)
	abs, err := filepath.Abs(v.Path)
	if err != nil {
		return v, err
	}
	v.Path = abs
	return v, nil
}

// createMissingVolumes creates, as docker creates named volumes, every
// writable volume whose file does not exist yet.
func createMissingVolumes(vols []sentry.Volume) error {
	for _, v := range vols {
		_, err := os.Stat(v.Path)
		switch {
		case err == nil:
			continue
		case !errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("--mount src=%s: %w", v.Path, err)
		case v.ReadOnly:
			return fmt.Errorf("--mount src=%s: the file does not exist, and a read-only volume is not created; create it with `rungv volume create %s`", v.Path, v.Path)
		}
		if err := ext4lite.Create(v.Path, defaultVolumeSize); err != nil {
			return fmt.Errorf("--mount src=%s: creating the volume: %w", v.Path, err)
		}
	}
	return nil
}
