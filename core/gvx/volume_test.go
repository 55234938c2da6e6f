package gvx

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/spec"
)

// TestVolumeMounts attaches volumes through Config.Mounts: a new one
// (created on first use) and a read-only one; Close leaves them clean.
func TestVolumeMounts(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data.ext4")
	cfg := config()
	cfg.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: data, Target: "/data"}}
	sb := newSandbox(t, cfg)
	if res := sh(t, sb, "echo from-the-sdk > /data/f && cat /data/f", nil); string(res.Stdout) != "from-the-sdk\n" {
		t.Fatalf("write to the volume: %+v", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got, err := sb.ReadFile(ctx, "/data/f"); err != nil || string(got) != "from-the-sdk\n" {
		t.Errorf("ReadFile from the volume: %q %v", got, err)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	out, err := exec.Command("e2fsck", "-fn", data).CombinedOutput()
	if err != nil || bytes.Contains(out, []byte("Fix?")) || bytes.Contains(out, []byte("WARNING")) {
		t.Errorf("e2fsck -fn after Close: %v\n%s", err, out)
	}
	if hdr, _ := exec.Command("dumpe2fs", "-h", data).CombinedOutput(); bytes.Contains(hdr, []byte("needs_recovery")) {
		t.Error("the volume needs recovery after Close")
	}

	cfg.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: data, Target: "/ro", ReadOnly: true}}
	sb = newSandbox(t, cfg)
	res := sh(t, sb, "cat /ro/f; touch /ro/g 2>&1 || true", nil)
	if !strings.Contains(string(res.Stdout), "from-the-sdk") || !strings.Contains(string(res.Stdout), "Read-only file system") {
		t.Errorf("read-only volume: %q", res.Stdout)
	}
}

func TestMountErrorsSayWhatToWrite(t *testing.T) {
	for _, c := range []struct {
		m    spec.Mount
		want string
	}{
		{spec.Mount{Type: "bind", Source: "x", Target: "/x"}, `mounts[0].type: "bind" is not a mount type; only "volume"`},
		{spec.Mount{Type: spec.MountVolume, Target: "/x"}, "mounts[0].source: is empty; name the volume's host file"},
		{spec.Mount{Type: spec.MountVolume, Source: "x", Target: "x"}, `mounts[0].target: "x" is not an absolute path`},
	} {
		cfg := config()
		cfg.Mounts = []spec.Mount{c.m}
		if _, err := New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error mentioning %q", c.m, err, c.want)
		}
	}
	cfg := config()
	cfg.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: "a,b.ext4", Target: "/data,x", ReadOnly: true}}
	sp := rungvSpec(t, cfg)
	if want := []spec.Mount{{Type: spec.MountVolume, Source: "a,b.ext4", Target: "/data,x", ReadOnly: true}}; !reflect.DeepEqual(sp.Mounts, want) {
		t.Errorf("spec mounts %+v; want %+v", sp.Mounts, want)
	}
}

// TestVolumePathsWithCommas: a volume's host file and mount point may hold
// commas, which rungv's --mount flag could not carry.
func TestVolumePathsWithCommas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run,1")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "a,b.ext4")
	cfg := config()
	cfg.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: data, Target: "/data,x"}}
	sb := newSandbox(t, cfg)
	if res := sh(t, sb, "echo comma > /data,x/f && cat /data,x/f && grep -c ' /data,x ' /proc/mounts", nil); string(res.Stdout) != "comma\n1\n" {
		t.Fatalf("the volume at /data,x: %+v", res)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if out, err := exec.Command("e2fsck", "-fn", data).CombinedOutput(); err != nil {
		t.Errorf("e2fsck -fn %s after Close: %v\n%s", data, err, out)
	}
}
