// Command erofsconvert measures gvx's OCI image → EROFS conversion (`rungv
// pull`) against mkfs.erofs on the same unpacked tree: wall time and peak
// RSS, medians over several runs, page cache warm for both.
//
// It expects a Debian root filesystem made by debootstrap (benchmarks/run.sh
// makes one) and builds from it, once, two OCI layouts in the bench cache:
//
//	debian        the rootfs as one gzip layer
//	debian+big    the same plus a layer with one 2 GiB file, to show that
//	              peak RSS does not grow with content size
package main

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/image"
)

func main() {
	rootfs := flag.String("rootfs", "", "debootstrapped root filesystem")
	work := flag.String("work", "", "bench cache directory (layouts, scratch)")
	rungv := flag.String("rungv", "build/rungv", "rungv binary")
	runs := flag.Int("runs", 5, "runs per measurement")
	flag.Parse()
	if *rootfs == "" || *work == "" {
		fmt.Fprintln(os.Stderr, "usage: erofsconvert -rootfs DIR -work DIR [-rungv PATH] [-runs N]")
		os.Exit(2)
	}
	if err := run(*rootfs, *work, *rungv, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "erofsconvert:", err)
		os.Exit(1)
	}
}

func run(rootfs, work, rungv string, runs int) error {
	debian := filepath.Join(work, "oci-debian")
	big := filepath.Join(work, "oci-debian-big")
	layerTar := filepath.Join(work, "debian-layer.tar.gz")
	bigTar := filepath.Join(work, "big-layer.tar.gz")
	if err := once(layerTar, func(tmp string) error { return tarTree(rootfs, tmp) }); err != nil {
		return err
	}
	if err := once(bigTar, func(tmp string) error { return bigFileLayer(tmp, 2<<30) }); err != nil {
		return err
	}
	if err := once(debian, func(tmp string) error { return writeLayout(tmp, layerTar) }); err != nil {
		return err
	}
	if err := once(big, func(tmp string) error { return writeLayout(tmp, layerTar, bigTar) }); err != nil {
		return err
	}
	tree, files := du(rootfs)
	gz, _ := os.Stat(layerTar)
	fmt.Printf("Debian rootfs: %s in %d entries; gzip layer %s\n\n", human(tree), files, human(gz.Size()))

	// rungv pull inflates gzip with igzip where it is installed, as this
	// process would.
	inflater := image.Inflater()
	scratch := filepath.Join(work, "scratch")
	os.RemoveAll(scratch)
	defer os.RemoveAll(scratch)
	pull := func(layoutDir string) []string {
		return []string{rungv, "--cache", filepath.Join(scratch, "cache"), "pull", "-q", "oci:" + layoutDir}
	}
	mkfs := []string{"mkfs.erofs", "-E", "noinline_data", "-x", "-1", filepath.Join(scratch, "out.erofs"), rootfs}
	cases := []benchCase{
		{args: pull(debian), input: debian, name: "rungv pull (gzip layer → EROFS, verified, fsync; inflated by " + inflater + ")"},
		{args: mkfs, input: rootfs, name: "mkfs.erofs -E noinline_data -x -1 (unpacked tree; output left in the page cache)"},
		{args: []string{"sh", "-c", `mkfs.erofs -E noinline_data -x -1 "$1" "$2" && sync -d "$1"`, "sh", filepath.Join(scratch, "out.erofs"), rootfs}, input: rootfs, name: "mkfs.erofs, then fsync of its output (durable, as rungv pull's)"},
		{args: pull(big), input: big, name: "rungv pull, + a 2 GiB file layer"},
	}
	if inflater == "igzip" {
		cases = append(cases, benchCase{args: pull(debian), input: debian, env: []string{image.InflateEnv + "=go"}, name: "rungv pull, inflated in Go (" + image.InflateEnv + "=go)"})
	}
	// Rounds interleave the cases, so that a change in the machine's speed
	// (these are shared virtual CPUs whose speed drifts by tens of percent
	// over minutes) lands on every case alike, and the ratios compare runs
	// made seconds apart. Round 0 warms up and is not counted.
	samples := make([][]sample, len(cases))
	for round := 0; round <= runs; round++ {
		for i, c := range cases {
			os.RemoveAll(scratch)
			if err := os.MkdirAll(scratch, 0o755); err != nil {
				return err
			}
			// Settle what the previous run left: its output's
			// deletion (discarded at the next journal commit where
			// the filesystem is mounted with discard, as here) and
			// mkfs.erofs's unsynced output. Otherwise the next run's
			// fsync, or its writes, pay for them.
			if err := syncFS(scratch); err != nil {
				return err
			}
			// The host may evict cold page cache at any time (DAMON
			// reclaim runs here); read the input back in so that every
			// run starts from a warm cache, as the doc comment says.
			if err := readTree(c.input); err != nil {
				return err
			}
			s, err := timeCommand(c.args, c.env)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if round > 0 {
				samples[i] = append(samples[i], s)
			}
		}
	}
	fmt.Printf("| what | wall p50 | wall min | peak RSS p50 |\n|---|---|---|---|\n")
	for i, c := range cases {
		res := summarize(c.name, samples[i])
		fmt.Printf("| %s | %.2f s | %.2f s | %s |\n", res.name, res.wall.Seconds(), res.min.Seconds(), human(res.rss))
	}
	fmt.Printf("\nrungv pull / mkfs.erofs: %.2f× (target ≤ 1.5×); / mkfs.erofs with fsync: %.2f×\n",
		medianRatio(samples[0], samples[1]), medianRatio(samples[0], samples[2]))
	fmt.Printf("(medians of the ratios within each round; %d interleaved rounds after a warm-up round, page cache warm for every run)\n", runs)
	return nil
}

// benchCase is one command the benchmark times, and the input it reads.
type benchCase struct {
	args  []string
	env   []string // added to the environment
	input string
	name  string
}

// medianRatio is the median over rounds of a[i]/b[i].
func medianRatio(a, b []sample) float64 {
	rs := make([]float64, 0, len(a))
	for i := range a {
		rs = append(rs, a[i].wall.Seconds()/b[i].wall.Seconds())
	}
	sort.Float64s(rs)
	return rs[len(rs)/2]
}

// syncFS flushes the filesystem holding dir.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// readTree reads every regular file under root, which brings it into the
// page cache.
func readTree(root string) error {
	buf := make([]byte, 1<<20)
	return filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
		return err
	})
}

type sample struct {
	wall time.Duration
	rss  int64
}

type result struct {
	name      string
	wall, min time.Duration
	rss       int64
}

func summarize(name string, rs []sample) result {
	sort.Slice(rs, func(i, j int) bool { return rs[i].wall < rs[j].wall })
	r := result{name: name, wall: rs[len(rs)/2].wall, min: rs[0].wall}
	rss := make([]int64, len(rs))
	for i, s := range rs {
		rss[i] = s.rss
	}
	sort.Slice(rss, func(i, j int) bool { return rss[i] < rss[j] })
	r.rss = rss[len(rss)/2]
	return r
}

func timeCommand(args, env []string) (sample, error) {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("%v: %w\n%s", args, err, stderr.String())
	}
	wall := time.Since(start)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return sample{wall: wall, rss: ru.Maxrss * 1024}, nil
}

// once creates path with build (given a temporary path beside it) unless
// it exists.
func once(path string, build func(tmp string) error) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	tmp := path + ".tmp"
	os.RemoveAll(tmp)
	fmt.Fprintf(os.Stderr, "building %s …\n", path)
	if err := build(tmp); err != nil {
		return fmt.Errorf("building %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// tarTree writes the rootfs as a gzip tar with GNU tar (numeric owners,
// xattrs), the way an image builder would.
func tarTree(rootfs, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := gzip.NewWriter(f)
	cmd := exec.Command("tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--sort=name", "-C", rootfs, "-cf", "-", ".")
	cmd.Stdout = zw
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return err
	}
	return zw.Close()
}

// bigFileLayer writes a layer holding one file of pseudo-random bytes,
// gzip-stored (incompressible content would not shrink anyway).
func bigFileLayer(out string, size int64) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.NoCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "srv/blob.bin", Mode: 0o644, Size: size, Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, rand.New(rand.NewSource(1)), size); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

func writeLayout(dir string, layerFiles ...string) error {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, lf := range layerFiles {
		l, err := tarball.LayerFromFile(lf, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Unix(1700000000, 0)}
	cf.Config.Cmd = []string{"/bin/bash"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img)
}

func du(root string) (int64, int) {
	var size int64
	var n int
	filepath.Walk(root, func(_ string, info os.FileInfo, err error) error {
		if err == nil {
			n++
			if info.Mode().IsRegular() {
				size += info.Size()
			}
		}
		return nil
	})
	return size, n
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
