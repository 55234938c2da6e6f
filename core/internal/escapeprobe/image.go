package escapeprobe

import (
	"archive/tar"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"z.gfire.dev/gvx/core/internal/testimage"
)

// Tag names the probe image in its docker archive.
const Tag = "gvx.test/escapeprobe:latest"

// Image is the probe image written by WriteImage.
type Image struct {
	// Layout is an OCI layout; LayoutRef names it for rungv.
	Layout string
	// Archive is a `docker save` tarball tagged Tag.
	Archive string
}

// LayoutRef is the rungv reference of the image's OCI layout.
func (i Image) LayoutRef() string { return "oci:" + i.Layout + ":latest" }

// WriteImage builds the probe binary and writes, in dir, the probe image:
// the test image's busybox base layer and /probe.
func WriteImage(dir string) (Image, error) {
	busybox, err := os.ReadFile(testimage.BusyboxPath)
	if err != nil {
		return Image{}, fmt.Errorf("reading %s: %w (apt-get install busybox-static)", testimage.BusyboxPath, err)
	}
	bin := filepath.Join(dir, "probe")
	build := exec.Command("go", "build", "-o", bin, "z.gfire.dev/gvx/core/internal/escapeprobe/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		return Image{}, fmt.Errorf("building the probe binary: %v\n%s", err, out)
	}
	probe, err := os.ReadFile(bin)
	if err != nil {
		return Image{}, err
	}
	top := []testimage.Entry{{Name: "probe", Type: tar.TypeReg, Mode: 0o755, Content: probe}}
	// Every applet, not only the test image's.
	list, err := exec.Command(testimage.BusyboxPath, "--list").Output()
	if err != nil {
		return Image{}, fmt.Errorf("busybox --list: %w", err)
	}
	for _, a := range strings.Fields(string(list)) {
		if !slices.Contains(testimage.Applets, a) && a != "busybox" && !strings.ContainsAny(a, "[/") {
			top = append(top, testimage.Entry{Name: "bin/" + a, Type: tar.TypeSymlink, Mode: 0o777, Linkname: "busybox"})
		}
	}
	img, err := testimage.Image([][]testimage.Entry{testimage.BaseLayer(busybox), top})
	if err != nil {
		return Image{}, err
	}
	out := Image{Layout: filepath.Join(dir, "oci"), Archive: filepath.Join(dir, "probe.tar")}
	p, err := layout.Write(out.Layout, empty.Index)
	if err != nil {
		return Image{}, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		return Image{}, err
	}
	tag, err := name.NewTag(Tag)
	if err != nil {
		return Image{}, err
	}
	if err := tarball.WriteToFile(out.Archive, tag, img); err != nil {
		return Image{}, err
	}
	return out, nil
}
