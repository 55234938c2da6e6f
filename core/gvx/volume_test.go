package gvx

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVolumeMounts attaches volumes through Config.Mounts: a new one
// (created on first use) and a read-only one; Close leaves them clean.
func TestVolumeMounts(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data.ext4")
	cfg := config()
	cfg.Mounts = []Mount{{Kind: MountVolume, ImagePath: data, GuestPath: "/data"}}
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

	cfg.Mounts = []Mount{{Kind: MountVolume, ImagePath: data, GuestPath: "/ro", ReadOnly: true}}
	sb = newSandbox(t, cfg)
	res := sh(t, sb, "cat /ro/f; touch /ro/g 2>&1 || true", nil)
	if !strings.Contains(string(res.Stdout), "from-the-sdk") || !strings.Contains(string(res.Stdout), "Read-only file system") {
		t.Errorf("read-only volume: %q", res.Stdout)
	}
}

func TestMountErrorsSayWhatToWrite(t *testing.T) {
	for _, c := range []struct {
		m    Mount
		want string
	}{
		{Mount{Kind: "bind", ImagePath: "x", GuestPath: "/x"}, "MountVolume"},
		{Mount{Kind: MountVolume, GuestPath: "/x"}, "ImagePath"},
		{Mount{Kind: MountVolume, ImagePath: "x", GuestPath: "x"}, "absolute"},
		{Mount{Kind: MountVolume, ImagePath: "a,b", GuestPath: "/x"}, "commas"},
	} {
		cfg := config()
		cfg.Mounts = []Mount{c.m}
		if _, err := cfg.args(3); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error mentioning %q", c.m, err, c.want)
		}
	}
	cfg := config()
	cfg.Mounts = []Mount{{Kind: MountVolume, ImagePath: "/v.ext4", GuestPath: "/data", ReadOnly: true}}
	a, err := cfg.args(3)
	if err != nil || !strings.Contains(strings.Join(a, " "), "--mount type=volume,src=/v.ext4,dst=/data,readonly") {
		t.Errorf("args: %q %v", a, err)
	}
}
