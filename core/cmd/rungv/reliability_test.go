package main

// The fault part of the reliability battery (issue 17): rungv killed with
// SIGKILL while its guest writes, and the host's disk filling during a pull
// and under a volume. `make test` runs a cheap pass; `make reliability`
// sets GVX_RELIABILITY_FULL=1 for the full counts and collects every
// part's figures, as markdown tables, in $GVX_RELIABILITY_REPORT.

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"z.gfire.dev/gvx/core/ext4lite"
	"z.gfire.dev/gvx/internal/battery"
)

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
