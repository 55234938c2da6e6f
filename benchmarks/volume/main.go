// Command volume measures ext4 volumes (core/ext4lite served by the
// Sentry, core/sentry/ext4fs) inside a real sandbox, side by side with the
// sandbox's tmpfs:
//
//   - untar a ~200 MB source tree onto the volume and onto tmpfs, in the
//     same sandbox, from the same tarball in tmpfs (plus the sync that
//     makes the volume durable);
//
//   - create, stat and unlink rates with 1,000 and 100,000 entries in one
//     directory;
//
//   - clone latency of a 4 GiB golden volume: a delta on the host's
//     filesystem, and a reflink on a loop-mounted XFS file when run as root.
//
//     go run ./benchmarks/volume -rungv build/rungv -image oci:DIR:latest [-work DIR] [-runs 5] [-only untar,metadata,clone]
//
// It prints markdown tables. It asserts nothing.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"z.gfire.dev/gvx/benchmarks/internal/benchfmt"
	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
)

var (
	rungv  = flag.String("rungv", "build/rungv", "rungv binary")
	image  = flag.String("image", "", "gvx image reference with busybox (cached or pullable)")
	cache  = flag.String("cache", "", "gvx image cache (default $GVX_CACHE)")
	work   = flag.String("work", "", "directory for volumes and the tarball (default: a temporary directory)")
	source = flag.String("tree", "", "directory to tar for the untar test (default: GOROOT's src and pkg, ~200 MB)")
	runs   = flag.Int("runs", 5, "untar runs per target")
	clones = flag.Int("clones", 50, "clones per clone-latency measurement")
	only   = flag.String("only", "untar,metadata,clone", "which measurements to run")
)

func main() {
	flag.Parse()
	if *image == "" {
		fail(fmt.Errorf("-image is required"))
	}
	abs, err := filepath.Abs(*rungv)
	if err != nil {
		fail(err)
	}
	*rungv = abs
	if *work == "" {
		dir, err := os.MkdirTemp("", "gvx-volume-bench-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		*work = dir
	}
	fmt.Printf("%d CPUs; load average %s; work directory on %s\n\n", runtime.NumCPU(), benchfmt.LoadAvg(), fsType(*work))
	for _, b := range []struct {
		name string
		run  func() error
	}{{"untar", benchUntar}, {"metadata", benchMetadata}, {"clone", benchClone}} {
		if !strings.Contains(","+*only+",", ","+b.name+",") {
			continue
		}
		if err := b.run(); err != nil {
			fail(fmt.Errorf("%s: %w", b.name, err))
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "volume:", err)
	os.Exit(1)
}

// newSandbox starts a sandbox with a fresh volume at /vol.
func newSandbox(ctx context.Context, name string, size int64) (*gvx.Sandbox, string, error) {
	vol := filepath.Join(*work, name+".ext4")
	os.Remove(vol)
	if err := ext4lite.Create(vol, size); err != nil {
		return nil, "", err
	}
	sb, err := gvx.New(ctx, gvx.Config{
		Sandbox: spec.Sandbox{
			Image:     *image,
			KeepAlive: true,
			Mounts:    []spec.Mount{{Type: spec.MountVolume, Source: vol, Target: "/vol"}},
		},
		Rungv: *rungv,
		Cache: *cache,
	})
	return sb, vol, err
}

// sh runs a script and returns its stdout and wall time.
func sh(ctx context.Context, sb *gvx.Sandbox, script string) (string, time.Duration, error) {
	start := time.Now()
	res, err := sb.Exec(ctx, []string{"/bin/sh", "-c", script}, nil)
	d := time.Since(start)
	if err != nil {
		return "", d, err
	}
	if res.ExitCode != 0 {
		return "", d, fmt.Errorf("%q: exit %d: %s", script, res.ExitCode, res.Stderr)
	}
	return string(res.Stdout), d, nil
}

func benchUntar() error {
	ctx := context.Background()
	tarball, files, size, err := makeTarball()
	if err != nil {
		return err
	}
	sb, _, err := newSandbox(ctx, "untar", 4<<30)
	if err != nil {
		return err
	}
	defer sb.Close()
	data, err := os.ReadFile(tarball)
	if err != nil {
		return err
	}
	if _, err := sb.WriteFile(ctx, "/tmp/tree.tar", bytes.NewReader(data), gvx.WriteOptions{Mode: 0o644}); err != nil {
		return err
	}
	data = nil
	fmt.Printf("## Untar %d files, %.0f MB (from a tarball in tmpfs, busybox tar; %d runs, interleaved)\n\n", files, float64(size)/1e6, *runs)
	fmt.Println("| target | untar p50 | untar min | untar + sync p50 | MB/s (p50) | vs tmpfs (p50) | vs tmpfs (min) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	targets := []struct{ name, dir string }{{"tmpfs (/tmp)", "/tmp/x"}, {"ext4 volume (ext4lite)", "/vol/x"}}
	untar := make([][]time.Duration, len(targets))
	synced := make([][]time.Duration, len(targets))
	// Interleaved, so load on the machine falls on both alike.
	for range *runs {
		for i, target := range targets {
			if _, _, err := sh(ctx, sb, "rm -rf "+target.dir+" && mkdir -p "+target.dir+" && sync"); err != nil {
				return err
			}
			_, d, err := sh(ctx, sb, "tar -xf /tmp/tree.tar -C "+target.dir)
			if err != nil {
				return err
			}
			_, ds, err := sh(ctx, sb, "sync")
			if err != nil {
				return err
			}
			untar[i] = append(untar[i], d)
			synced[i] = append(synced[i], d+ds)
			if _, _, err := sh(ctx, sb, "rm -rf "+target.dir); err != nil {
				return err
			}
		}
	}
	for i, target := range targets {
		p50, lo := benchfmt.Percentile(untar[i], 50), benchfmt.Percentile(untar[i], 0)
		fmt.Printf("| %s | %v | %v | %v | %.0f | %.2f× | %.2f× |\n", target.name, p50.Round(time.Millisecond), lo.Round(time.Millisecond),
			benchfmt.Percentile(synced[i], 50).Round(time.Millisecond), float64(size)/1e6/p50.Seconds(),
			float64(p50)/float64(benchfmt.Percentile(untar[0], 50)), float64(lo)/float64(benchfmt.Percentile(untar[0], 0)))
	}
	fmt.Println()
	return nil
}

// makeTarball tars the source tree once into the work directory.
func makeTarball() (string, int, int64, error) {
	src := *source
	var roots []string
	if src == "" {
		goroot := runtime.GOROOT()
		if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
			goroot = strings.TrimSpace(string(out))
		}
		roots = []string{filepath.Join(goroot, "src"), filepath.Join(goroot, "pkg")}
	} else {
		roots = []string{src}
	}
	path := filepath.Join(*work, "tree.tar")
	f, err := os.Create(path)
	if err != nil {
		return "", 0, 0, err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	var files int
	var size int64
	for _, root := range roots {
		base := filepath.Base(root)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			link := ""
			if info.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(p); err != nil {
					return err
				}
			} else if !info.Mode().IsRegular() && !info.IsDir() {
				return nil
			}
			hdr, err := tar.FileInfoHeader(info, link)
			if err != nil {
				return err
			}
			hdr.Name = filepath.Join(base, rel)
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if info.Mode().IsRegular() {
				r, err := os.Open(p)
				if err != nil {
					return err
				}
				n, err := io.Copy(tw, r)
				r.Close()
				if err != nil {
					return err
				}
				size += n
				files++
			}
			return nil
		})
		if err != nil {
			return "", 0, 0, err
		}
	}
	return path, files, size, tw.Close()
}

func benchMetadata() error {
	ctx := context.Background()
	tool, err := buildFstool()
	if err != nil {
		return err
	}
	sb, _, err := newSandbox(ctx, "metadata", 8<<30)
	if err != nil {
		return err
	}
	defer sb.Close()
	if _, err := sb.WriteFile(ctx, "/tmp/fstool", bytes.NewReader(tool), gvx.WriteOptions{Mode: 0o755}); err != nil {
		return err
	}
	fmt.Println("## Metadata: create, stat, unlink of N entries in one directory (ops/s, one guest process)")
	fmt.Println()
	fmt.Println("| target | N | create/s | stat/s | unlink/s |")
	fmt.Println("|---|---|---|---|---|")
	for _, n := range []int{1000, 100000} {
		for _, target := range []struct{ name, dir string }{{"tmpfs", "/tmp/b"}, {"ext4 volume", "/vol/b"}} {
			out, _, err := sh(ctx, sb, fmt.Sprintf("/tmp/fstool bench %s %d && rmdir %s", target.dir, n, target.dir))
			if err != nil {
				return err
			}
			rates := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(l)
				if len(f) == 3 {
					rates[f[0]] = strings.TrimSuffix(f[2], "/s")
				}
			}
			fmt.Printf("| %s | %d | %s | %s | %s |\n", target.name, n, rates["create"], rates["stat"], rates["unlink"])
		}
	}
	fmt.Println()
	return nil
}

func buildFstool() ([]byte, error) {
	out := filepath.Join(*work, "fstool")
	cmd := exec.Command("go", "build", "-ldflags=-s -w", "-o", out, "./core/sentry/internal/fstool")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building fstool (run from the repository root): %v\n%s", err, stderr.String())
	}
	return os.ReadFile(out)
}

func benchClone() error {
	fmt.Printf("## Clone a 4 GiB golden volume (%d clones each)\n\n", *clones)
	fmt.Println("| host filesystem | method | p50 | p99 | max |")
	fmt.Println("|---|---|---|---|---|")
	if err := cloneRow(*work); err != nil {
		return err
	}
	xfs, cleanup, reason := mountXFS()
	if reason != "" {
		fmt.Printf("| XFS (loop) | — | skipped: %s | | |\n", reason)
	} else {
		defer cleanup()
		if err := cloneRow(xfs); err != nil {
			return err
		}
	}
	fmt.Println()
	return nil
}

func cloneRow(dir string) error {
	golden := filepath.Join(dir, "golden.ext4")
	os.Remove(golden)
	if err := ext4lite.Create(golden, 4<<30); err != nil {
		return err
	}
	defer os.Remove(golden)
	var ds []time.Duration
	var method string
	for i := range *clones {
		ep := filepath.Join(dir, fmt.Sprintf("episode-%d.ext4", i))
		start := time.Now()
		m, err := ext4lite.Clone(golden, ep)
		ds = append(ds, time.Since(start))
		if err != nil {
			return err
		}
		method = m.String()
		os.Remove(ep)
	}
	fmt.Printf("| %s | %s | %v | %v | %v |\n", fsType(dir), method, benchfmt.Percentile(ds, 50).Round(time.Microsecond), benchfmt.Percentile(ds, 99).Round(time.Microsecond), benchfmt.Percentile(ds, 100).Round(time.Microsecond))
	return nil
}

// mountXFS loop-mounts a fresh XFS file with reflink, or says why not.
func mountXFS() (string, func(), string) {
	if os.Getuid() != 0 {
		return "", nil, "needs root"
	}
	img := filepath.Join(*work, "xfs.img")
	mnt := filepath.Join(*work, "xfs")
	f, err := os.Create(img)
	if err != nil {
		return "", nil, err.Error()
	}
	f.Truncate(6 << 30)
	f.Close()
	if out, err := exec.Command("mkfs.xfs", "-q", "-m", "reflink=1", img).CombinedOutput(); err != nil {
		return "", nil, "mkfs.xfs: " + strings.TrimSpace(string(out))
	}
	os.Mkdir(mnt, 0o755)
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		return "", nil, "loop mount: " + strings.TrimSpace(string(out))
	}
	return mnt, func() { exec.Command("umount", mnt).Run(); os.Remove(img) }, ""
}

func fsType(dir string) string {
	out, err := exec.Command("stat", "-f", "-c", "%T", dir).Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
