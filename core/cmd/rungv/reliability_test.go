package main

// The fault part of the reliability battery (issue 17): rungv killed with
// SIGKILL while its guest writes, and the host's disk filling during a pull
// and under a volume. `make test` runs a cheap pass; `make reliability`
// sets GVX_RELIABILITY_FULL=1 for the full counts and collects every
// part's figures, as markdown tables, in $GVX_RELIABILITY_REPORT.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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

// recordWriter is a guest script that writes numbered records to the
// volume at /data: record i is the file /data/r/i, recordSize(i) bytes
// of recordContent, and the line "record i" appended to /data/log, each
// written with dd conv=fsync. Only after both fsyncs returned does it
// print "SYNCED i"; a failed record prints "FAILED i <dd's error>". It
// stops after maxFailures failures in a row and prints "DONE".
func recordWriter(w recordSizes, maxFailures int) string {
	return fmt.Sprintf(`mkdir -p /data/r && sync && echo READY
i=0; failed=0
while [ $failed -lt %d ]; do
	if yes "record $i" | head -c $((%d + (i * 4099) %% %d)) | dd of=/data/r/$i conv=fsync status=none 2>/tmp/err &&
		echo "record $i" | dd of=/data/log oflag=append conv=notrunc,fsync status=none 2>/tmp/err; then
		echo "SYNCED $i"; failed=0
	else
		echo "FAILED $i $(head -n 1 /tmp/err)"; failed=$((failed + 1))
	fi
	i=$((i + 1))
done
echo DONE`, maxFailures, w.base, w.spread)
}

// recordSizes sets the sizes of recordWriter's records.
type recordSizes struct{ base, spread int }

func (w recordSizes) size(i int) int { return w.base + (i*4099)%w.spread }

// content is what record i's file holds: `yes "record i" | head -c size`.
func (w recordSizes) content(i int) []byte {
	line := fmt.Sprintf("record %d\n", i)
	n := w.size(i)
	return []byte(strings.Repeat(line, n/len(line)+1)[:n])
}

// writerOutput is what the host read of recordWriter's stdout.
type writerOutput struct {
	ready  bool
	synced []int
	failed []string
	done   bool
	other  []string
}

func (o *writerOutput) add(line string) {
	f := strings.Fields(line)
	switch {
	case line == "READY":
		o.ready = true
	case line == "DONE":
		o.done = true
	case len(f) == 2 && f[0] == "SYNCED":
		if n, err := strconv.Atoi(f[1]); err == nil {
			o.synced = append(o.synced, n)
			return
		}
		o.other = append(o.other, line)
	case len(f) >= 2 && f[0] == "FAILED":
		o.failed = append(o.failed, line)
	default:
		o.other = append(o.other, line)
	}
}

// verifyRecords checks, through ext4lite, that every synced record is in
// the volume at img with its content, and that /data/log begins with
// their lines in order (it may hold more: records written but not yet
// reported). It returns a description of each missing or wrong record.
func verifyRecords(img string, w recordSizes, synced []int, readOnly bool) ([]string, error) {
	fs, err := ext4lite.OpenVolume(img, ext4lite.Options{ReadOnly: readOnly})
	if err != nil {
		return nil, fmt.Errorf("opening the volume: %w", err)
	}
	defer fs.Close()
	var bad []string
	read := func(ino ext4lite.Ino) ([]byte, error) {
		st, err := fs.Stat(ino)
		if err != nil {
			return nil, err
		}
		data := make([]byte, st.Size)
		n, err := fs.ReadAt(ino, data, 0)
		if err != nil && err != io.EOF {
			return nil, err
		}
		return data[:n], nil
	}
	if len(synced) == 0 {
		return nil, nil
	}
	dir, err := fs.Lookup(ext4lite.RootIno, "r")
	if err != nil {
		return []string{fmt.Sprintf("the records' directory /r: %v", err)}, nil
	}
	for _, i := range synced {
		ino, err := fs.Lookup(dir, strconv.Itoa(i))
		if err != nil {
			bad = append(bad, fmt.Sprintf("record %d: %v", i, err))
			continue
		}
		got, err := read(ino)
		if err != nil {
			bad = append(bad, fmt.Sprintf("record %d: reading: %v", i, err))
		} else if want := w.content(i); !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("record %d: %d bytes, want %d with its content", i, len(got), len(want)))
		}
	}
	ino, err := fs.Lookup(ext4lite.RootIno, "log")
	if err != nil {
		return append(bad, fmt.Sprintf("/log: %v", err)), nil
	}
	log, err := read(ino)
	if err != nil {
		return append(bad, fmt.Sprintf("/log: reading: %v", err)), nil
	}
	var want strings.Builder
	for _, i := range synced {
		fmt.Fprintf(&want, "record %d\n", i)
	}
	if !strings.HasPrefix(string(log), want.String()) {
		bad = append(bad, fmt.Sprintf("/log does not begin with the %d synced records' lines: %q", len(synced), truncate(string(log), 200)))
	}
	return bad, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// checkVolume runs ext4lite.Check (the real e2fsck -fn, its output
// scanned for fixes and warnings, and the needs_recovery flag) and
// returns its problems, or nil when the volume is clean.
func checkVolume(img string) ([]string, error) {
	res, err := ext4lite.Check(img)
	if err != nil {
		return nil, err
	}
	if res.Checker != "e2fsck" {
		return nil, fmt.Errorf("e2fsck is not installed (apt-get install e2fsprogs)")
	}
	if res.Clean {
		return nil, nil
	}
	return append([]string{fmt.Sprintf("exit %d", res.ExitCode)}, append(res.Problems, res.Output)...), nil
}

// replayWithE2fsck copies img and lets e2fsck -fy replay its journal; it
// returns the copy, which must then be clean.
func replayWithE2fsck(t *testing.T, img string) string {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "replayed-by-e2fsck.ext4")
	if out, err := exec.Command("cp", "--sparse=always", img, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	if out, err := exec.Command("e2fsck", "-fy", cp).CombinedOutput(); exitCode(err) != 0 {
		t.Fatalf("e2fsck -fy (journal replay) changed more than the journal: exit %d\n%s", exitCode(err), out)
	}
	return cp
}

// startWriter starts `rungv run` with the volume at /data running script
// and returns its stdout lines on a channel closed at EOF.
func startWriter(t *testing.T, img, vol, script string) (*exec.Cmd, <-chan string, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(rungvBinary, "--cache", sharedCache(t), "run", "-q", "--mount", "type=volume,src="+vol+",dst=/data", img, "sh", "-c", script)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, lines, stderr
}

// TestFaultKill9DuringWrites kills rungv with SIGKILL at a random moment
// while its guest writes and fsyncs numbered records to a volume. After
// each kill the volume's journal must replay — by e2fsck, and by ext4lite
// or a new sandbox — to a filesystem the real e2fsck -fn finds clean, and
// every record whose fsync returned before the kill must be there.
func TestFaultKill9DuringWrites(t *testing.T) {
	trials := battery.Count(5, 100)
	seed := battery.Seed(t)
	img := testImage(t)
	sizes := recordSizes{base: 100, spread: 20000}
	script := recordWriter(sizes, 1)
	var recovered, e2fsckClean, ext4liteClean, sandboxClean, checked, maxRecords int
	for trial := range trials {
		rng := rand.New(rand.NewPCG(seed, uint64(trial)))
		// The kill lands after a random number of records, a random
		// time into the next one (each takes some 20 ms).
		killAfter := 1 + rng.IntN(40)
		delay := time.Duration(rng.IntN(25000)) * time.Microsecond
		where := fmt.Sprintf("seed %d trial %d (kill after %d records + %v)", seed, trial, killAfter, delay)

		vol := filepath.Join(t.TempDir(), "v.ext4")
		if err := ext4lite.Create(vol, 64<<20); err != nil {
			t.Fatal(err)
		}
		cmd, lines, stderr := startWriter(t, img, vol, script)
		var out writerOutput
		deadline := time.After(60 * time.Second)
		var kill <-chan time.Time
	wait:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					cmd.Wait()
					t.Fatalf("%s: the writer ended before the kill: %+v\n%s", where, out, stderr)
				}
				out.add(line)
				if kill == nil && len(out.synced) == killAfter {
					kill = time.After(delay)
				}
			case <-kill:
				break wait
			case <-deadline:
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("%s: %d of %d records in 60 s: %+v\n%s", where, len(out.synced), killAfter, out, stderr)
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		// What the guest printed before it died was printed after its
		// fsyncs returned: those records count too.
		for line := range lines {
			out.add(line)
		}
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("%s: rungv was not killed: %v\n%s", where, cmd.ProcessState, stderr)
		}
		if len(out.failed) > 0 || len(out.other) > 0 {
			t.Fatalf("%s: the writer failed before the kill: %q %q\n%s", where, out.failed, out.other, stderr)
		}
		checked += len(out.synced)
		maxRecords = max(maxRecords, len(out.synced))
		if res, err := ext4lite.Check(vol); err != nil {
			t.Fatal(err)
		} else if res.NeedsRecovery {
			recovered++
		}

		// e2fsck's own replay, on a copy.
		replayed := replayWithE2fsck(t, vol)
		if problems, err := checkVolume(replayed); err != nil || problems != nil {
			t.Fatalf("%s: after e2fsck's journal replay, e2fsck -fn: %v %q", where, err, problems)
		}
		if bad, err := verifyRecords(replayed, sizes, out.synced, true); err != nil || bad != nil {
			t.Fatalf("%s: after e2fsck's journal replay, fsync'ed records are lost: %v %q", where, err, bad)
		}
		e2fsckClean++

		// Every fourth volume is opened again by a new sandbox, the
		// others by ext4lite itself; both replay the journal in place.
		if trial%4 == 0 {
			verifyInSandbox(t, where, img, vol, sizes, out.synced)
			sandboxClean++
		} else {
			if bad, err := verifyRecords(vol, sizes, out.synced, false); err != nil || bad != nil {
				t.Fatalf("%s: after ext4lite's journal replay, fsync'ed records are lost: %v %q", where, err, bad)
			}
			ext4liteClean++
		}
		if problems, err := checkVolume(vol); err != nil || problems != nil {
			t.Fatalf("%s: after replay in place, e2fsck -fn: %v %q", where, err, problems)
		}
	}
	battery.Table(t, "kill -9 of rungv during fsync'ed writes to a volume", []string{
		"trials", "needed journal recovery", "e2fsck-clean after e2fsck's replay", "clean after ext4lite's replay", "clean after a new sandbox's replay", "fsync'ed records checked", "lost", "seed",
	}, []string{
		strconv.Itoa(trials), strconv.Itoa(recovered), fmt.Sprintf("%d/%d", e2fsckClean, trials), strconv.Itoa(ext4liteClean), strconv.Itoa(sandboxClean),
		fmt.Sprintf("%d (up to %d a trial)", checked, maxRecords), "0", strconv.FormatUint(seed, 10),
	})
}

// verifyInSandbox opens vol in a new sandbox, whose guest checksums every
// synced record and prints the log.
func verifyInSandbox(t *testing.T, where, img, vol string, sizes recordSizes, synced []int) {
	t.Helper()
	var script strings.Builder
	script.WriteString("cd /data/r && busybox sha256sum")
	for _, i := range synced {
		fmt.Fprintf(&script, " %d", i)
	}
	script.WriteString(" </dev/null; echo ===; cat /data/log")
	if len(synced) == 0 {
		script.Reset()
		script.WriteString("echo ===")
	}
	out, errOut, code := runCLI(t, "", "run", "-q", "--mount", "type=volume,src="+vol+",dst=/data", img, "sh", "-c", script.String())
	if code != 0 {
		t.Fatalf("%s: a new sandbox on the killed volume: exit %d\n%s%s", where, code, out, errOut)
	}
	sums, log, _ := strings.Cut(out, "===\n")
	var want, wantLog strings.Builder
	for _, i := range synced {
		sum := sha256.Sum256(sizes.content(i))
		fmt.Fprintf(&want, "%s  %d\n", hex.EncodeToString(sum[:]), i)
		fmt.Fprintf(&wantLog, "record %d\n", i)
	}
	if sums != want.String() || !strings.HasPrefix(log, wantLog.String()) {
		t.Fatalf("%s: a new sandbox does not see every fsync'ed record:\n%s", where, out)
	}
}

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

// cacheLeftovers lists what a failed pull left in the image cache at
// root that it should not have: anything in tmp/, an image directory
// without both its files, a refs.json that does not parse or names an
// image that is not there.
func cacheLeftovers(root string) []string {
	var bad []string
	tmp, _ := os.ReadDir(filepath.Join(root, "tmp"))
	for _, e := range tmp {
		bad = append(bad, "tmp/"+e.Name())
	}
	images, _ := os.ReadDir(filepath.Join(root, "images"))
	have := map[string]bool{}
	for _, e := range images {
		dir := filepath.Join(root, "images", e.Name())
		names, _ := os.ReadDir(dir)
		var files []string
		for _, n := range names {
			files = append(files, n.Name())
		}
		if !slices.Equal(files, []string{"image.json", "rootfs.erofs"}) {
			bad = append(bad, fmt.Sprintf("images/%s holds %q", e.Name(), files))
			continue
		}
		var meta struct{ Size int64 }
		b, err := os.ReadFile(filepath.Join(dir, "image.json"))
		st, serr := os.Stat(filepath.Join(dir, "rootfs.erofs"))
		if err != nil || json.Unmarshal(b, &meta) != nil || serr != nil || st.Size() != meta.Size {
			bad = append(bad, fmt.Sprintf("images/%s is incomplete", e.Name()))
			continue
		}
		have["sha256:"+e.Name()] = true
	}
	names, _ := os.ReadDir(root)
	for _, e := range names {
		switch n := e.Name(); {
		case n == "images" || n == "tmp" || n == "locks":
		case n == "refs.json":
			var refs struct {
				Refs map[string]string `json:"refs"`
			}
			b, err := os.ReadFile(filepath.Join(root, n))
			if err != nil || json.Unmarshal(b, &refs) != nil {
				bad = append(bad, "refs.json does not parse")
			}
			for ref, id := range refs.Refs {
				if !have[id] {
					bad = append(bad, fmt.Sprintf("refs.json names %s for %s, which is not cached", id, ref))
				}
			}
		default:
			bad = append(bad, n)
		}
	}
	return bad
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
