package main

// The disk-full faults: a pull into, and a volume on, a small private tmpfs.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/internal/battery"
)

const (
	// mountNSEnv names the test a re-executed test binary runs inside a
	// private mount namespace (see privateMountNS).
	mountNSEnv = "RUNGV_TEST_IN_MOUNTNS"
)

// privateMountNS makes the calling test run as root in a private mount
// namespace, where it may mount a size-limited tmpfs that disappears with
// the namespace. The first call re-executes the test binary for just this
// test in a new namespace and relays its outcome; it returns false and
// the caller returns. In that copy it returns true.
func privateMountNS(t *testing.T) bool {
	t.Helper()
	if os.Getenv(mountNSEnv) == t.Name() {
		return true
	}
	if os.Geteuid() != 0 {
		battery.Skip(t, "filling a host file system needs root, to mount a size-limited tmpfs in a private mount namespace (run as root)")
	}
	timeout := 10 * time.Minute
	if d, ok := t.Deadline(); ok {
		timeout = time.Until(d) - 10*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v", "-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), mountNSEnv+"="+t.Name(), rungvBinaryEnv+"="+rungvBinary)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	t.Logf("in a private mount namespace:\n%s", out)
	switch {
	case err != nil:
		t.Fatalf("the test in a private mount namespace failed: %v", err)
	case bytes.Contains(out, []byte("--- SKIP")):
		battery.Skip(t, "skipped in the private mount namespace: "+lastLine(string(out[:bytes.Index(out, []byte("--- SKIP"))])))
	}
	return false
}

// mountTmpfs mounts a tmpfs with options (size=, nr_inodes=) at a new
// directory.
//
// Preconditions: the test runs in a private mount namespace.
func mountTmpfs(t *testing.T, options string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, options); err != nil {
		battery.Skip(t, fmt.Sprintf("cannot mount a tmpfs: %v", err))
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// remountTmpfs changes the limits of the tmpfs at dir.
func remountTmpfs(t *testing.T, dir, options string) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, options); err != nil {
		t.Fatalf("remounting the tmpfs at %s with %s: %v", dir, options, err)
	}
}

// cacheUsage is how much of a tmpfs the files under root take: pages
// of data, and inodes (the tmpfs root's own included).
func cacheUsage(t *testing.T, root string) (pages, inodes int64) {
	t.Helper()
	inodes = 1
	err := filepath.Walk(root, func(_ string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		inodes++
		if info.Mode().IsRegular() {
			pages += (info.Size() + 4095) / 4096
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages, inodes
}

// TestFaultDiskFullDuringPull pulls the test image into a cache on a
// tmpfs too small for it: short of space at each stage of writing the
// EROFS image, and short of inodes at each file a pull creates (the
// cache's directories, locks, the image's metadata, the references). A
// pull that fails must say the disk is full and leave nothing
// half-written; once there is room, the same pull must succeed.
func TestFaultDiskFullDuringPull(t *testing.T) {
	if !privateMountNS(t) {
		return
	}
	img := testImage(t)
	// What a pull needs, measured on a roomy cache.
	roomy := t.TempDir()
	if _, errOut, code := rungv(t, roomy, "pull", img); code != 0 {
		t.Fatalf("pull into a roomy cache: %s", errOut)
	}
	pages, inodes := cacheUsage(t, roomy)
	room := fmt.Sprintf("size=%d,nr_inodes=%d", (pages+64)*4096, inodes+64)
	var limits []string
	sizes := []int64{1, pages / 4, pages / 2}
	if os.Getenv(battery.FullEnv) == "1" {
		for p := int64(8); p < pages; p += pages / 32 {
			sizes = append(sizes, p)
		}
	}
	for p := pages - 6; p <= pages+1; p++ {
		sizes = append(sizes, p)
	}
	slices.Sort(sizes)
	for _, p := range slices.Compact(sizes) {
		limits = append(limits, fmt.Sprintf("size=%d", p*4096))
	}
	for n := int64(1); n <= inodes+1; n++ {
		limits = append(limits, fmt.Sprintf("size=%d,nr_inodes=%d", (pages+64)*4096, n))
	}
	var failed, clear, tidy, succeeded, retried int
	for _, limit := range limits {
		mnt := mountTmpfs(t, limit)
		cache := filepath.Join(mnt, "cache")
		out, errOut, code := rungv(t, cache, "pull", img)
		if code == 0 {
			succeeded++
			if bad := cacheLeftovers(cache); bad != nil {
				t.Errorf("%s: a successful pull left %q", limit, bad)
			}
			continue
		}
		failed++
		t.Logf("%s: %s", limit, lastLine(errOut))
		if !strings.Contains(errOut, "no space left on device") {
			t.Errorf("%s: the pull failed without saying the disk is full: exit %d\n%s%s", limit, code, out, errOut)
		} else {
			clear++
		}
		if bad := cacheLeftovers(cache); bad != nil {
			t.Errorf("%s: the failed pull left %q in the cache", limit, bad)
		} else {
			tidy++
		}
		remountTmpfs(t, mnt, room)
		if _, errOut, code := rungv(t, cache, "pull", img); code != 0 {
			t.Errorf("%s: pulling again with room: %s", limit, errOut)
		} else if bad := cacheLeftovers(cache); bad != nil {
			t.Errorf("%s: pulling again with room left %q", limit, bad)
		} else {
			retried++
		}
	}
	battery.Table(t, "host disk full during `rungv pull`", []string{
		"limits tried", "pulls failed", "said the disk is full", "left nothing half-written", "succeeded on a retry with room", "fit (succeeded)",
	}, []string{
		fmt.Sprintf("%d (4 KiB–%d KiB of space; 1–%d inodes; the pull needs %d KiB, %d inodes)", len(limits), (pages+1)*4, inodes+1, pages*4, inodes),
		strconv.Itoa(failed), strconv.Itoa(clear), strconv.Itoa(tidy), strconv.Itoa(retried), strconv.Itoa(succeeded),
	})
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// TestFaultDiskFullUnderVolume runs the record writer on a sparse volume
// whose host file system (a small tmpfs) fills long before the volume
// does. The guest must see ENOSPC (or rungv must say the host disk is
// full), every record whose fsync returned must survive, and the volume
// must replay to an e2fsck-clean filesystem — on a copy, and in place once
// the host has room again.
func TestFaultDiskFullUnderVolume(t *testing.T) {
	if !privateMountNS(t) {
		return
	}
	trials := battery.Count(2, 10)
	seed := battery.Seed(t)
	img := testImage(t)
	var enospc, clean, checked int
	for trial := range trials {
		rng := rand.New(rand.NewPCG(seed, uint64(trial)))
		// Records of 32-160 KiB fill a 2-6 MiB host in well under 200.
		hostSize := int64(2+rng.IntN(5)) << 20
		sizes := recordSizes{base: 32<<10 + rng.IntN(64<<10), spread: 1 + rng.IntN(64<<10)}
		where := fmt.Sprintf("seed %d trial %d (%d MiB host, records %d+%d bytes)", seed, trial, hostSize>>20, sizes.base, sizes.spread)
		mnt := mountTmpfs(t, fmt.Sprintf("size=%d", hostSize))
		vol := filepath.Join(mnt, "v.ext4")
		if err := ext4lite.Create(vol, 1<<30); err != nil {
			t.Fatal(err)
		}
		cmd, lines, stderr := startWriter(t, img, vol, recordWriter(sizes, 5))
		var out writerOutput
		timer := time.AfterFunc(5*time.Minute, func() { cmd.Process.Kill() })
		for line := range lines {
			out.add(line)
		}
		err := cmd.Wait()
		timer.Stop()
		if !out.done {
			t.Fatalf("%s: the writer did not finish: %v %+v\n%s", where, err, out, stderr)
		}
		sawENOSPC := slices.ContainsFunc(out.failed, func(l string) bool { return strings.Contains(l, "No space left on device") })
		if !sawENOSPC && !strings.Contains(stderr.String(), "no space left on device") {
			t.Fatalf("%s: neither the guest nor rungv said the host disk is full: %v %q\n%s", where, err, out.failed, stderr)
		}
		if sawENOSPC {
			enospc++
		}
		checked += len(out.synced)
		t.Logf("%s: %d records fsync'ed, then %q; rungv: %v %s", where, len(out.synced), out.failed, err, strings.TrimSpace(stderr.String()))

		// On a copy with room: e2fsck's replay and ext4lite's.
		replayed := replayWithE2fsck(t, vol)
		if problems, err := checkVolume(replayed); err != nil || problems != nil {
			t.Fatalf("%s: after e2fsck's journal replay, e2fsck -fn: %v %q", where, err, problems)
		}
		if bad, err := verifyRecords(replayed, sizes, out.synced, true); err != nil || bad != nil {
			t.Fatalf("%s: after e2fsck's replay, fsync'ed records are lost: %v %q", where, err, bad)
		}
		// In place, once the host has room: a new sandbox replays it.
		remountTmpfs(t, mnt, "size=256m")
		verifyInSandbox(t, where, img, vol, sizes, out.synced)
		if problems, err := checkVolume(vol); err != nil || problems != nil {
			t.Fatalf("%s: after a new sandbox's replay, e2fsck -fn: %v %q", where, err, problems)
		}
		clean++
	}
	battery.Table(t, "host disk full under a volume (a sparse 1 GiB volume on a 2–6 MiB tmpfs)", []string{
		"trials", "guest saw ENOSPC", "e2fsck-clean after replay", "fsync'ed records checked", "lost", "seed",
	}, []string{
		strconv.Itoa(trials), strconv.Itoa(enospc), fmt.Sprintf("%d/%d", clean, trials), strconv.Itoa(checked), "0", strconv.FormatUint(seed, 10),
	})
}
