package main

import (
	"context"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/store"
)

type pullOptions struct {
	Cache    string `json:"cache"`
	Insecure bool   `json:"insecure"`
	Platform string `json:"platform"`
}

type pullEvent struct {
	Kind   string `json:"kind"`
	Ref    string `json:"ref"`
	ID     string `json:"id"`
	Layer  int    `json:"layer,omitempty"`
	Layers int    `json:"layers,omitempty"`
	Done   int64  `json:"done,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

type pulledImage struct {
	ID         string   `json:"id"`
	Erofs      string   `json:"erofs"`
	Size       int64    `json:"size"`
	Layers     int      `json:"layers"`
	Files      uint64   `json:"files"`
	Refs       []string `json:"refs"`
	XattrFiles int      `json:"xattr_files"`
}

var eventKinds = map[store.EventKind]string{
	store.EventResolved: "resolved",
	store.EventCached:   "cached",
	store.EventWaiting:  "waiting",
	store.EventLayer:    "layer",
	store.EventWriting:  "writing",
	store.EventDone:     "done",
}

func imagePull(ref, optionsJSON string, progress func(string)) (string, error) {
	var o pullOptions
	if err := decodeJSON("options", optionsJSON, &o); err != nil {
		return "", err
	}
	s, err := store.Open(o.Cache)
	if err != nil && o.Cache != "" {
		return "", fmt.Errorf(`options: "cache": %w; give a directory this process can create and write`, err)
	}
	if err != nil {
		return "", err
	}
	opts := store.PullOptions{Options: image.Options{Insecure: o.Insecure}}
	if o.Platform != "" {
		p, err := v1.ParsePlatform(o.Platform)
		if err != nil || !strings.Contains(o.Platform, "/") {
			return "", invalid(`options: "platform" %q: want OS/ARCH such as linux/amd64`, o.Platform)
		}
		opts.Platform = *p
	}
	if progress != nil {
		opts.Progress = func(e store.Event) {
			pe := pullEvent{Kind: eventKinds[e.Kind], Ref: e.Ref, ID: e.ID}
			if e.Kind == store.EventLayer {
				pe.Layer, pe.Layers, pe.Done, pe.Size = e.Progress.Layer, e.Progress.Layers, e.Progress.Done, e.Progress.Size
			}
			progress(encodeJSON(pe))
		}
	}
	img, err := s.Pull(context.Background(), ref, opts)
	if err != nil {
		return "", err
	}
	xattrFiles := map[string]bool{}
	for _, x := range img.Xattrs {
		xattrFiles[x.Path] = true
	}
	return encodeJSON(pulledImage{img.ID, img.ErofsPath(), img.Size, img.Layers, img.Files, img.Refs, len(xattrFiles)}), nil
}
