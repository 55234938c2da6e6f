package main

import (
	"bytes"
	"crypto/md5"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"z.gfire.dev/gvx/core/internal/testimage"
)

// TestRunSparseLayer pulls an image with a layer of sparse files GNU tar
// wrote, one claiming 1 TiB, and reads them in the sandbox: the data
// where it was, zeros in the holes.
func TestRunSparseLayer(t *testing.T) {
	if out, err := exec.Command("tar", "--version").Output(); err != nil || !strings.Contains(string(out), "GNU tar") {
		t.Skip("GNU tar is not installed (apt-get install tar)")
	}
	busybox, err := os.ReadFile(testimage.BusyboxPath)
	if err != nil {
		t.Skipf("%v (apt-get install busybox-static)", err)
	}
	src := t.TempDir()
	const T = 1 << 40
	write := func(name string, size int64, data map[int64]string) {
		f, err := os.Create(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		f.Truncate(size)
		for off, s := range data {
			if _, err := f.WriteAt([]byte(s), off); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("huge", T, map[int64]string{0: "first", T / 2: "middle", T - 12: "the last 12."})
	write("small", 3<<20+5, map[int64]string{100: "a", 2 << 20: "b", 3<<20 + 1: "end!"})
	small, _ := os.ReadFile(filepath.Join(src, "small"))

	img, err := testimage.Image([][]testimage.Entry{testimage.BaseLayer(busybox)})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range [][]string{{"--format=gnu", "--sparse"}, {"--format=posix", "--sparse-version=1.0"}} {
		dir := filepath.Join(t.TempDir(), strings.TrimPrefix(format[0], "--format="))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("tar", append(append([]string{"-C", src, "-cf", "-", "--owner=0", "--group=0"}, format...), "huge", "small")...).Output()
		if err != nil {
			t.Fatal(err)
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out)), nil },
			tarball.WithMediaType(types.OCIUncompressedLayer))
		if err != nil {
			t.Fatal(err)
		}
		withSparse, err := mutate.AppendLayers(img, l)
		if err != nil {
			t.Fatal(err)
		}
		p, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.AppendImage(withSparse, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(rungvBinary, "--cache", filepath.Join(dir, "cache"), "run", "-q", "oci:"+filepath.Join(dir, "oci")+":latest", "sh", "-c",
			fmt.Sprintf(`stat -c %%s /huge; head -c 5 /huge; echo; dd if=/huge bs=4096 skip=%d count=1 2>/dev/null | head -c 6; echo; dd if=/huge bs=4096 skip=%d count=1 2>/dev/null | tr -d '\0' | wc -c; tail -c 12 /huge; echo; md5sum </small`, T/2/4096, T/4/4096))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", format[0], err, stderr.Bytes())
		}
		want := fmt.Sprintf("%d\nfirst\nmiddle\n0\nthe last 12.\n%x  -\n", int64(T), md5.Sum(small))
		if string(got) != want {
			t.Errorf("%s: the sandbox reads\n%s\nwant\n%s", format[0], got, want)
		}
	}
}
