package main

// The fault tests' record writer, and the checks of which records survived.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/ext4lite"
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
