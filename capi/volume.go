package main

import (
	"z.gfire.dev/gvx/core/ext4lite"
)

// Volumes are single-file ext4 images the Sentry reads and writes itself.
// These calls run in the caller's process: they are file operations, no
// sandbox is involved.

func volumeCreate(path string, size int64) error {
	if path == "" {
		return invalid("path is empty: name the image file to create")
	}
	if size <= 0 {
		return invalid("size %d: give the volume's size in bytes (the file is sparse)", size)
	}
	return ext4lite.Create(path, size)
}

func volumeClone(golden, episode string) (string, error) {
	if golden == "" || episode == "" {
		return "", invalid("golden and episode paths must not be empty")
	}
	method, err := ext4lite.Clone(golden, episode)
	if err != nil {
		return "", err
	}
	return method.String(), nil
}

func volumeFlatten(episode, out string) error {
	if episode == "" || out == "" {
		return invalid("episode and output paths must not be empty")
	}
	return ext4lite.Flatten(episode, out)
}

type checkResultJSON struct {
	Checker       string   `json:"checker"`
	Clean         bool     `json:"clean"`
	NeedsRecovery bool     `json:"needs_recovery"`
	Problems      []string `json:"problems"`
}

func volumeCheck(path string) (string, error) {
	if path == "" {
		return "", invalid("path is empty: name the image file to check")
	}
	r, err := ext4lite.Check(path)
	if err != nil {
		return "", err
	}
	return encodeJSON(checkResultJSON{r.Checker, r.Clean, r.NeedsRecovery, r.Problems}), nil
}
