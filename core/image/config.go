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
