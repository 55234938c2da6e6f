package store

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/internal/filehash"
	"z.gfire.dev/gvx/core/internal/testimage"
	"z.gfire.dev/gvx/core/internal/treecheck"
)

// Environment of the helper process TestConcurrentPulls starts.
const (
	helperRefEnv   = "GVX_STORE_TEST_PULL_REF"
	helperCacheEnv = "GVX_STORE_TEST_PULL_CACHE"
)

func TestMain(m *testing.M) {
	if ref := os.Getenv(helperRefEnv); ref != "" {
		s, err := Open(os.Getenv(helperCacheEnv))
		if err == nil {
			_, err = s.Pull(context.Background(), ref, PullOptions{Progress: func(e Event) {
				if e.Kind == EventDone {
					fmt.Println("converted")
				}
			}})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func buildTestImage(t *testing.T) *testimage.Built {
	t.Helper()
	b, err := testimage.Build()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startRegistry serves an in-process registry on 127.0.0.1 and pushes the
// test image to it, returning the reference.
func startRegistry(t *testing.T, b *testimage.Built) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref := host + "/gvx/busybox:latest"
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(b.Layout)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatalf("pushing to the in-process registry: %v", err)
	}
	return ref
}

// TestPullTreeEquality is the acceptance check of the image pipeline: the
// test image pulled from a registry, an OCI layout and a docker archive
// gives one image ID and byte-identical EROFS images, whose every entry,
// read through gVisor's EROFS reader and through fsck.erofs --extract,
// equals the layers flattened by an independent reference model.
func TestPullTreeEquality(t *testing.T) {
	b := buildTestImage(t)
	regRef := startRegistry(t, b)
	want, wantXattrs := testimage.Expected(b.Specs)

	var sums []string
	var ids []string
	// The layout is pulled twice: inflated by igzip (where installed) and
	// in Go; both must give the same bytes.
	sources := []struct {
		name, ref string
		goInflate bool
	}{
		{"registry", regRef, false},
		{"oci/" + image.Inflater(), b.LayoutRef(), false},
		{"oci/go", b.LayoutRef(), true},
		{"docker-archive", b.ArchiveRef(), false},
	}
	for _, src := range sources {
		ref := src.ref
		t.Run(src.name, func(t *testing.T) {
			s := newStore(t)
			var events []EventKind
			var stats PullStats
			img, err := s.Pull(context.Background(), ref, PullOptions{
				Options: image.Options{Insecure: true},
				Progress: func(e Event) {
					events = append(events, e.Kind)
					stats = e.Stats
				},
				GoInflate: src.goInflate,
			})
			if err != nil {
				t.Fatalf("pull %s: %v", ref, err)
			}
			if events[0] != EventResolved || events[len(events)-1] != EventDone {
				t.Errorf("events %v: want resolved first and done last", events)
			}
			// The test image's layers are gzip in every source (the docker
			// archive go-containerregistry writes keeps them compressed).
			wantInflater := image.Inflater()
			if src.goInflate {
				wantInflater = "go"
			}
			if stats.GzipInflater != wantInflater {
				t.Errorf("layers inflated by %q, want %q", stats.GzipInflater, wantInflater)
			}
			ids = append(ids, img.ID)
			sums = append(sums, filehash.SHA256(t, img.ErofsPath()))

			got, err := treecheck.FromErofs(img.ErofsPath())
			if err != nil {
				t.Fatalf("gVisor's reader: %v", err)
			}
			if diff := treecheck.Diff(want, got, treecheck.Ignore{}); len(diff) > 0 {
				t.Fatalf("through gVisor's reader the image differs from the layers:\n%s", strings.Join(diff, "\n"))
			}
			checkXattrs(t, img, wantXattrs)
			checkFsckExtract(t, img.ErofsPath(), want)

			if img.Config.Cmd[0] != "/bin/sh" || img.Config.WorkingDir != "/" || len(img.Config.ExposedPorts) != 1 {
				t.Errorf("config not kept: %+v", img.Config)
			}
			if entries, _ := os.ReadDir(filepath.Join(s.Root(), tmpDir)); len(entries) != 0 {
				t.Errorf("tmp/ not empty after pull: %v", entries)
			}
		})
	}
	for i := range ids {
		if ids[i] != ids[0] || sums[i] != sums[0] {
			t.Fatalf("sources disagree: ids %v, EROFS sha256 %v", ids, sums)
		}
	}
}

func checkXattrs(t *testing.T, img *Image, want map[string]map[string]string) {
	t.Helper()
	got := map[string]map[string]string{}
	for _, x := range img.Xattrs {
		p := strings.TrimPrefix(x.Path, "/")
		if got[p] == nil {
			got[p] = map[string]string{}
		}
		got[p][x.Name] = string(x.Value)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("xattrs in the cache metadata: got %q, want %q", got, want)
	}
}

func checkFsckExtract(t *testing.T, path string, want treecheck.Listing) {
	t.Helper()
	if _, err := exec.LookPath("fsck.erofs"); err != nil {
		t.Log("fsck.erofs not installed: skipping its check (make test installs erofs-utils)")
		return
	}
	if os.Geteuid() != 0 {
		t.Log("not root: skipping fsck.erofs --extract (it cannot preserve owners or create devices)")
		return
	}
	dir := filepath.Join(t.TempDir(), "x")
	if out, err := exec.Command("fsck.erofs", "--extract="+dir, "--preserve", path).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs: %v\n%s", err, out)
	}
	got, err := treecheck.FromDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	// erofs-utils 1.5 extracts hard links as copies, drops setuid, setgid
	// and sticky bits, and sets directory times before filling them;
	// gVisor's reader checks those.
	if diff := treecheck.Diff(want, got, treecheck.Ignore{DirMtime: true, Hardlinks: true, SpecialBits: true}); len(diff) > 0 {
		t.Fatalf("fsck.erofs --extract differs from the layers:\n%s", strings.Join(diff, "\n"))
	}
}

func TestPullCachedAndRefs(t *testing.T) {
	b := buildTestImage(t)
	s := newStore(t)
	ctx := context.Background()
	first, err := s.Pull(ctx, b.LayoutRef(), PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []EventKind
	second, err := s.Pull(ctx, b.ArchiveRef(), PullOptions{Progress: func(e Event) { kinds = append(kinds, e.Kind) }})
	if err != nil {
		t.Fatal(err)
	}
	if second.ID != first.ID || len(kinds) != 2 || kinds[1] != EventCached {
		t.Fatalf("second pull of the same image: id %s vs %s, events %v (want resolved, cached)", second.ID, first.ID, kinds)
	}
	if len(second.Refs) != 2 {
		t.Fatalf("refs %v: want the layout and the archive reference", second.Refs)
	}
	// Lookups by reference, by short ID, by full ID.
	for _, key := range []string{b.LayoutRef(), first.ShortID(), first.ID} {
		if img, err := s.Get(key); err != nil || img.ID != first.ID {
			t.Errorf("Get(%q) = %v, %v", key, img, err)
		}
	}
	if _, err := s.Get("deadbeef"); err == nil || !strings.Contains(err.Error(), "rungv images") {
		t.Errorf("Get of an unknown ID: %v", err)
	}

	// Untag one reference: the image stays; untag the other: it goes.
	r, err := s.Remove(ctx, b.LayoutRef())
	if err != nil || len(r.Untagged) != 1 || len(r.Deleted) != 0 {
		t.Fatalf("rmi of one of two refs: %+v, %v", r, err)
	}
	if _, err := os.Stat(first.ErofsPath()); err != nil {
		t.Fatalf("image deleted while still referenced: %v", err)
	}
	r, err = s.Remove(ctx, b.ArchiveRef())
	if err != nil || len(r.Deleted) != 1 {
		t.Fatalf("rmi of the last ref: %+v, %v", r, err)
	}
	if _, err := os.Stat(first.Dir); !os.IsNotExist(err) {
		t.Fatalf("image directory still there: %v", err)
	}

	// Prune: a dangling image goes, a referenced one stays (unless all).
	if _, err := s.Pull(ctx, b.LayoutRef(), PullOptions{}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Prune(ctx, false)
	if err != nil || len(rep.Deleted) != 0 {
		t.Fatalf("prune removed a referenced image: %+v %v", rep, err)
	}
	rep, err = s.Prune(ctx, true)
	if err != nil || len(rep.Deleted) != 1 || rep.Reclaimed == 0 {
		t.Fatalf("prune -a: %+v %v", rep, err)
	}
	if imgs, _ := s.List(); len(imgs) != 0 {
		t.Fatalf("images left after prune -a: %v", imgs)
	}
}

// TestConcurrentPulls pulls one image from 4 processes into one empty
// cache at once: one valid entry, no leftovers.
func TestConcurrentPulls(t *testing.T) {
	b := buildTestImage(t)
	cache := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	outs := make([][]byte, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), helperRefEnv+"="+b.LayoutRef(), helperCacheEnv+"="+cache)
			outs[i], errs[i] = cmd.CombinedOutput()
		}()
	}
	wg.Wait()
	converted := 0
	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("pull process %d: %v\n%s", i, errs[i], outs[i])
		}
		converted += strings.Count(string(outs[i]), "converted")
	}
	if converted != 1 {
		t.Errorf("%d processes converted the image; the per-image lock should let exactly one do it", converted)
	}
	s, err := Open(cache)
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := s.List()
	if err != nil || len(imgs) != 1 {
		t.Fatalf("cache holds %d images (%v), want 1", len(imgs), err)
	}
	if entries, _ := os.ReadDir(filepath.Join(cache, tmpDir)); len(entries) != 0 {
		t.Fatalf("tmp/ not empty: %v", entries)
	}
	want, _ := testimage.Expected(b.Specs)
	got, err := treecheck.FromErofs(imgs[0].ErofsPath())
	if err != nil {
		t.Fatal(err)
	}
	if diff := treecheck.Diff(want, got, treecheck.Ignore{}); len(diff) > 0 {
		t.Fatalf("the cached image is wrong:\n%s", strings.Join(diff, "\n"))
	}
}

// corruptLayout copies the test image's OCI layout and lets damage change
// the largest layer blob.
func corruptLayout(t *testing.T, b *testimage.Built, damage func(blob []byte) []byte) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "oci")
	if out, err := exec.Command("cp", "-a", b.Layout, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	blobs, _ := filepath.Glob(filepath.Join(dst, "blobs", "sha256", "*"))
	var largest string
	var size int64
	for _, p := range blobs {
		if st, err := os.Stat(p); err == nil && st.Size() > size {
			largest, size = p, st.Size()
		}
	}
	raw, err := os.ReadFile(largest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(largest, damage(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	return "oci:" + dst + ":latest"
}

func TestPullRejectsDamagedImages(t *testing.T) {
	b := buildTestImage(t)
	otherLayer := func([]byte) []byte {
		// A valid gzip stream of a different, valid tar.
		var buf strings.Builder
		zw := gzip.NewWriter(&buf)
		zw.Write(make([]byte, 1024)) // an empty tar: two zero blocks
		zw.Close()
		return []byte(buf.String())
	}
	cases := []struct {
		name   string
		damage func([]byte) []byte
		want   []string
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }, []string{"layer 1 of 3", "the layer blob sha256:", "its content has digest"}},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, []string{"layer 1 of 3", "the layer blob sha256:", "bytes long, but its descriptor gives"}},
		{"other content", otherLayer, []string{"layer 1 of 3", "the layer blob sha256:", "bytes long, but its descriptor gives"}},
	}
	for _, c := range cases {
		for _, goInflate := range []bool{false, true} {
			name := c.name + "/" + image.Inflater()
			if goInflate {
				name = c.name + "/go"
			}
			t.Run(name, func(t *testing.T) {
				ref := corruptLayout(t, b, c.damage)
				s := newStore(t)
				_, err := s.Pull(context.Background(), ref, PullOptions{GoInflate: goInflate})
				if err == nil {
					t.Fatal("pull of a damaged image succeeded")
				}
				t.Logf("error: %v", err)
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if imgs, _ := s.List(); len(imgs) != 0 {
					t.Errorf("a damaged image was cached")
				}
				if entries, _ := os.ReadDir(filepath.Join(s.Root(), tmpDir)); len(entries) != 0 {
					t.Errorf("tmp/ not empty after a failed pull: %v", entries)
				}
			})
		}
	}
	t.Run("unknown digest", func(t *testing.T) {
		_, err := newStore(t).Pull(context.Background(), "oci:"+b.Layout+"@sha256:"+strings.Repeat("0", 64), PullOptions{})
		if err == nil || !strings.Contains(err.Error(), "has no manifest") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unknown tag", func(t *testing.T) {
		_, err := newStore(t).Pull(context.Background(), "oci:"+b.Layout+":nope", PullOptions{})
		if err == nil || !strings.Contains(err.Error(), `no image tagged "nope"; it has: latest`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("registry: unknown repository", func(t *testing.T) {
		ref := startRegistry(t, b)
		_, err := newStore(t).Pull(context.Background(), strings.Replace(ref, "busybox", "nothere", 1), PullOptions{})
		if err == nil || !strings.Contains(err.Error(), "check the repository name") {
			t.Fatalf("got %v", err)
		}
	})
}
