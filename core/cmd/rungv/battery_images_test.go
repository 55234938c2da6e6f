package main

// The malformed-image part of the reliability battery (issue 17): hostile
// and corrupt layers, docker archives and OCI layouts, each pulled with
// `rungv pull` from an OCI layout, a docker archive and an in-process
// registry on 127.0.0.1. Each must end promptly with a clear error naming
// what is wrong (or, where docker accepts it, be accepted with everything
// kept inside the image), leaving nothing outside the cache.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/internal/battery"
)

// TestBatteryMalformedImages pulls every hostile layer from an OCI layout,
// a docker archive and an in-process registry (the full run; the cheap run
// takes one source per layer, in turn), and every hostile archive and
// layout as it is. Each pull ends within the hang deadline with a clear
// error that names what is wrong, or, for what docker accepts, succeeds;
// a run that fails leaves the cache as it was and its tmp/ empty, and no
// run leaves anything in its home, temporary or working directory, nor a
// device node, FIFO, socket or set-ID file anywhere in the cache.
func TestBatteryMalformedImages(t *testing.T) {
	seed := battery.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	reg := startBatteryRegistry(t)
	var c tally
	first := rng.IntN(3)
	var failures []string

	type pullCase struct {
		name   string
		ref    string
		input  string // the directory holding the input
		env    []string
		accept bool
		want   []string
	}
	var cases []pullCase
	for i, lc := range layerCases() {
		dir := t.TempDir()
		s := imageSpec{layers: lc.layers(t)}
		sources := []int{0, 1, 2}
		if !battery.Full() {
			sources = []int{(first + i) % 3}
		}
		for _, src := range sources {
			var ref string
			switch src {
			case 0:
				ref = writeLayout(t, filepath.Join(dir, "oci"), s)
			case 1:
				ref = writeArchive(t, filepath.Join(dir, "docker.tar"), s)
			case 2:
				var err error
				if ref, err = reg.push(t, writeLayoutDir(t, filepath.Join(dir, "push"), s)); err != nil {
					t.Logf("%s: the registry client will not push it (%v); pulling the layout instead", lc.name, err)
					ref = writeLayout(t, filepath.Join(dir, "oci"), s)
				}
			}
			pc := pullCase{name: lc.name + " / " + [...]string{"oci", "docker-archive", "registry"}[src], ref: ref, input: dir, accept: lc.accept, want: lc.want}
			cases = append(cases, pc)
			if battery.Full() && strings.HasPrefix(lc.name, "gzip") {
				// Go's inflater as well as igzip.
				pc.name += " / go inflate"
				pc.env = []string{image.InflateEnv + "=go"}
				cases = append(cases, pc)
			}
		}
	}
	for _, sc := range structureCases() {
		dir := t.TempDir()
		cases = append(cases, pullCase{name: sc.name, ref: sc.input(t, dir), input: dir, accept: sc.accept, want: sc.want})
	}

	for _, pc := range cases {
		sc := newScratch(t)
		cache := t.TempDir()
		before := treeListing(pc.input)
		args := []string{"--cache", cache, "pull", "-q"}
		if strings.HasPrefix(pc.ref, reg.host) {
			args = append(args, "--insecure")
		}
		sc.extraEnv = pc.env
		r := sc.run(append(args, pc.ref)...)
		outcome, detail := classify(r, pc.want)
		if outcome == outAccepted && !pc.accept {
			outcome, detail = outUnclear, "accepted: docker refuses this; want a clear error"
		}
		effects := sc.leftovers()
		if after := treeListing(pc.input); !slices.Equal(before, after) {
			effects = append(effects, "the input changed")
		}
		effects = append(effects, hostileFiles(cache)...)
		effects = append(effects, cacheLeftovers(cache)...)
		if outcome != outAccepted {
			if imgs, _ := os.ReadDir(filepath.Join(cache, "images")); len(imgs) != 0 {
				effects = append(effects, "a failed pull cached an image")
			}
		}
		c.add(pc.name, outcome, r.took, len(effects))
		t.Logf("%-60s %-13s %5d ms  %s", pc.name, outcome, r.took.Milliseconds(), truncate(firstLine(r.stderr), 240))
		if outcome != outClear && outcome != outAccepted {
			failures = append(failures, fmt.Sprintf("%s: %s: %s", pc.name, outcome, detail))
		}
		if len(effects) > 0 {
			failures = append(failures, fmt.Sprintf("%s: left %q", pc.name, effects))
		}
	}
	c.table(t, "Malformed images: hostile and corrupt layers, docker archives and OCI layouts through `rungv pull`")
	if len(failures) > 0 {
		t.Errorf("%d of %d cases failed:\n%s", len(failures), c.tried, strings.Join(failures, "\n"))
	}
}

// writeLayoutDir writes s as an OCI layout and returns the directory.
func writeLayoutDir(t *testing.T, dir string, s imageSpec) string {
	writeLayout(t, dir, s)
	return dir
}
