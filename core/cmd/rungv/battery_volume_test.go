package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"z.gfire.dev/gvx/internal/battery"
)

// bigDirEntries is how many names the large directory holds: enough, with
// 1 KiB blocks, for its htree to have a level of index nodes.
const bigDirEntries = 2000

// baseVolumes are the real ext4 images, made by mke2fs, that the cases
// damage copies of.
type baseVolumes struct {
	csum    string // mke2fs's ext4 defaults, 1 KiB blocks: metadata_csum on
	plain   string // the same without metadata_csum, so damage meets the structure checks, not a checksum
	journal string // csum with two transactions (a descriptor, a revoke) to replay
	jcsum   string // plain with checksummed (v3) transactions to replay
}

// makeBaseVolumes makes the images: files, directories (one with a
// two-level htree), a fast and a slow symlink, in-inode and block xattrs,
// a sparse file whose extent tree has depth 1, and a journal.
func makeBaseVolumes(t *testing.T, dir string) baseVolumes {
	t.Helper()
	src := filepath.Join(dir, "src")
	for _, d := range []string{"dir/sub", "big"} {
		if err := os.MkdirAll(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dir/file", "hello\n")
	write("dir/sub/f", "sub\n")
	write("xa", "xattrs\n")
	for i := range bigDirEntries {
		write(bigDirName(i), "")
	}
	if err := os.Symlink("dir/file", filepath.Join(src, "fast")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(strings.Repeat("./", 40)+"dir/file", filepath.Join(src, "slow")); err != nil {
		t.Fatal(err)
	}
	// 40 runs of data apart: 40 extents, more than the inode holds.
	f, err := os.Create(filepath.Join(src, "frag"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, err := f.WriteAt([]byte(strings.Repeat(strconv.Itoa(i), 100)), int64(i)*65536); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	big := filepath.Join(dir, "xattr-value")
	if err := os.WriteFile(big, []byte(strings.Repeat("v", 600)), 0o644); err != nil {
		t.Fatal(err)
	}

	b := baseVolumes{csum: filepath.Join(dir, "csum.ext4"), plain: filepath.Join(dir, "plain.ext4"), journal: filepath.Join(dir, "journal.ext4"), jcsum: filepath.Join(dir, "jcsum.ext4")}
	if err := os.WriteFile(b.csum, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(b.csum, 32<<20); err != nil {
		t.Fatal(err)
	}
	onHost(t, "mke2fs", "-q", "-t", "ext4", "-b", "1024", "-I", "256", "-F", "-d", src, b.csum)
	debugfsRun(t, b.csum, true, "ea_set /xa user.small v", "ea_set -f "+big+" /xa user.big")
	// e2fsck -D indexes the directories mke2fs -d left linear.
	if out, err := exec.Command("e2fsck", "-fyD", b.csum).CombinedOutput(); exitCode(err) > 1 {
		t.Fatalf("e2fsck -fyD: %v\n%s", err, out)
	}
	if out := debugfsRun(t, b.csum, false, "htree /big"); !strings.Contains(out, "Indirect levels: 1") {
		t.Fatalf("/big's htree has no index level:\n%s", truncate(out, 2000))
	}
	if out := debugfsRun(t, b.csum, false, "stat /frag"); !strings.Contains(out, "(ETB0)") {
		t.Fatalf("/frag's extent tree has depth 0:\n%s", out)
	}
	if out := debugfsRun(t, b.csum, false, "stat /xa"); regexp.MustCompile(`File ACL: 0\b`).MatchString(out) {
		t.Fatalf("/xa has no xattr block:\n%s", out)
	}
	copySparse(t, b.csum, b.plain)
	onHost(t, "tune2fs", "-O", "^metadata_csum", b.plain)
	for _, j := range []struct {
		img, base, open string
	}{{b.journal, b.csum, "jo"}, {b.jcsum, b.plain, "jo -c"}} {
		copySparse(t, j.base, j.img)
		// The last block is free: the replay writes it.
		last := debugfsNumber(t, j.img, "stats", `Block count:\s+(\d+)`) - 1
		data := filepath.Join(dir, "journal-data")
		if err := os.WriteFile(data, []byte(strings.Repeat("J", 1024)), 0o644); err != nil {
			t.Fatal(err)
		}
		debugfsRun(t, j.img, true, j.open, fmt.Sprintf("jw -b %d %s", last, data), fmt.Sprintf("jw -r %d", last-1), "jc")
		if out := debugfsRun(t, j.img, false, "logdump"); !strings.Contains(out, "descriptor block") || !strings.Contains(out, "revoke table") {
			t.Fatalf("the journal of %s holds no transactions:\n%s", j.img, out)
		}
	}
	return b
}

func bigDirName(i int) string {
	return fmt.Sprintf("big/name-with-a-long-tail-to-fill-directory-blocks-%04d", i)
}

// TestBatteryCorruptVolumes gives rungv volumes with each metadata
// structure damaged, read-write and read-only: each is refused at mount
// with an error that names the volume, the problem and what to do, or the
// guest gets I/O errors for the damaged part, which rungv explains, and
// the rest works. The cheap pass runs a random third of the cases
// read-write; the full one, every case both ways.
func TestBatteryCorruptVolumes(t *testing.T) {
	for _, tool := range []string{"mke2fs", "debugfs", "dumpe2fs", "e2fsck", "tune2fs"} {
		if _, err := exec.LookPath(tool); err != nil {
			battery.Skip(t, tool+" is not installed (apt-get install e2fsprogs)")
		}
	}
	img := testImage(t)
	dir := t.TempDir()
	bases := makeBaseVolumes(t, dir)
	seed := battery.Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	modes := []string{""}
	if battery.Full() {
		modes = append(modes, ",readonly")
	}
	var ty tally
	for i, c := range volumeCases() {
		if !battery.Full() && rng.IntN(3) != 0 && !c.mustReport {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("case-%d.ext4", i))
			defer os.Remove(path)
			copySparse(t, c.base(bases), path)
			c.damage(t, &vol{path: path, bs: 1024})
			if c.mustReport {
				if clean, out := e2fsckClean(path); clean {
					t.Fatalf("e2fsck -fn finds the damaged volume clean:\n%s", out)
				}
			}
			damaged, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range modes {
				if err := os.WriteFile(path, damaged, 0o644); err != nil {
					t.Fatal(err)
				}
				r := runBounded(t, "run", "-q", "--mount", "type=volume,src="+path+",dst=/v"+mode, img, "sh", "-c", guestScript)
				o, detail := volumeOutcome(r, path)
				if c.mustReport && o == outAccepted {
					o, detail = outUnclear, "SILENT CORRUPTION: the guest read the damaged file without an error: "+detail
				}
				if c.mustReport && o == outClear && (!strings.Contains(r.stderr, "inode ") || !strings.Contains(r.stderr, "e2fsck -fy")) {
					o, detail = outUnclear, "the report names no inode or does not say to run e2fsck -fy: "+detail
				}
				ty.record(t, c.name+mode, o, r.took, detail)
			}
		})
	}
	ty.table(t, "Corrupt ext4 volumes (each metadata structure, each unsupported feature)")
}
