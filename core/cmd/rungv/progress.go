package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/store"
)

// pullReporter renders pull events: a bar redrawn in place on a terminal,
// one line per layer otherwise (CI logs, pipes).
type pullReporter struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	width   int
	start   time.Time
	last    time.Time // last redraw
	rate    rateMeter
	drawn   bool // a bar line is on screen
	current int  // layer whose bar is drawn
}

const redrawEvery = 100 * time.Millisecond

func newPullReporter(f *os.File) *pullReporter {
	r := &pullReporter{w: f, start: time.Now(), width: 80}
	if term.IsTerminal(int(f.Fd())) {
		r.tty = true
		if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 40 {
			r.width = w
		}
	}
	return r
}

func (r *pullReporter) event(e store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case store.EventResolved:
		fmt.Fprintf(r.w, "Pulling %s (image %s)\n", e.Ref, short(e.ID))
	case store.EventCached:
		fmt.Fprintf(r.w, "Image %s is cached already\n", short(e.ID))
	case store.EventWaiting:
		fmt.Fprintf(r.w, "Waiting for another process converting image %s\n", short(e.ID))
	case store.EventLayer:
		r.layer(e)
	case store.EventWriting:
		r.clear()
		fmt.Fprintln(r.w, "Writing metadata")
	case store.EventDone:
		r.clear()
		r.done(e)
	}
}

func (r *pullReporter) layer(e store.Event) {
	p := e.Progress
	r.rate.add(time.Now(), p.AllDone)
	if p.LayerDone {
		// A finished layer gets a permanent line; on a terminal the bar
		// below shows the layer in progress.
		r.clear()
		fmt.Fprintf(r.w, "  layer %d/%d %s %s done\n", p.Layer, p.Layers, shortDigest(p.Digest), humanBytes(p.Done))
		return
	}
	if !r.tty {
		return
	}
	now := time.Now()
	if now.Sub(r.last) < redrawEvery && p.Layer == r.current {
		return
	}
	r.last, r.current = now, p.Layer
	label := fmt.Sprintf("  layer %d/%d %s ", p.Layer, p.Layers, shortDigest(p.Digest))
	sizes := " " + humanBytes(p.Done)
	if p.Size > 0 {
		sizes += " / " + humanBytes(p.Size)
	}
	sizes += "  " + humanBytes(int64(r.rate.perSecond())) + "/s"
	barWidth := r.width - len(label) - len(sizes) - 3
	bar := ""
	if barWidth >= 10 && p.Size > 0 {
		filled := int(float64(barWidth) * float64(min(p.Done, p.Size)) / float64(p.Size))
		bar = "[" + strings.Repeat("=", filled) + strings.Repeat(" ", barWidth-filled) + "]"
	}
	fmt.Fprintf(r.w, "\r\033[K%s%s%s", label, bar, sizes)
	r.drawn = true
}

func (r *pullReporter) clear() {
	if r.drawn {
		fmt.Fprint(r.w, "\r\033[K")
		r.drawn = false
	}
}

// slowPull is how long a pull may take before rungv suggests igzip, where
// it inflated in Go.
const slowPull = 2 * time.Second

func (r *pullReporter) done(e store.Event) {
	img, s := e.Image, e.Stats
	fmt.Fprintf(r.w, "Converted %d layers, %d tar entries, into %d files (%s EROFS) in %.2fs\n",
		img.Layers, s.Entries, s.Files, humanBytes(img.Size), s.Duration.Seconds())
	if s.Duration > slowPull && s.GzipInflater == "go" && os.Getenv(image.InflateEnv) != "go" {
		fmt.Fprintln(r.w, "  gzip layers were inflated in Go: igzip (Debian package isal) makes pulls like this about 1.7× faster")
	}
	if s.DeadBlocks > 0 {
		fmt.Fprintf(r.w, "  %s of content replaced by later layers was left out\n", humanBytes(int64(s.DeadBlocks)*4096))
	}
	if len(img.Xattrs) > 0 {
		names := map[string]bool{}
		for _, x := range img.Xattrs {
			ns, _, _ := strings.Cut(x.Name, ".")
			if x.Name == "security.capability" {
				ns = x.Name
			} else {
				ns += ".*"
			}
			names[ns] = true
		}
		var list []string
		for n := range names {
			list = append(list, n)
		}
		sort.Strings(list)
		fmt.Fprintf(r.w, "%d files carry xattrs (%s): kept in the image metadata, since gVisor's EROFS cannot hold them\n",
			s.XattrFiles, strings.Join(list, ", "))
	}
}

func (r *pullReporter) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clear()
}

// rateMeter estimates throughput over the last few seconds.
type rateMeter struct {
	samples []rateSample
}

type rateSample struct {
	at    time.Time
	bytes int64
}

func (m *rateMeter) add(at time.Time, bytes int64) {
	m.samples = append(m.samples, rateSample{at, bytes})
	for len(m.samples) > 2 && at.Sub(m.samples[0].at) > 3*time.Second {
		m.samples = m.samples[1:]
	}
}

func (m *rateMeter) perSecond() float64 {
	if len(m.samples) < 2 {
		return 0
	}
	first, last := m.samples[0], m.samples[len(m.samples)-1]
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(last.bytes-first.bytes) / dt
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func shortDigest(d string) string {
	algo, hex, ok := strings.Cut(d, ":")
	if !ok {
		return short(d)
	}
	if len(hex) > 12 {
		hex = hex[:12]
	}
	return algo + ":" + hex
}
