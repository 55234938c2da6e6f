package blockdev

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func makeGolden(t *testing.T, size int) (string, []byte) {
	t.Helper()
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	// An ext4-looking superblock, so the UUID gets recorded.
	data[1024+0x38], data[1024+0x39] = 0x53, 0xEF
	path := filepath.Join(t.TempDir(), "golden.img")
	if err := os.WriteFile(path, data, 0o444); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// TestDeltaMatchesModel writes random ranges through a delta and checks
// every read against an in-memory copy, across reopens and discards.
func TestDeltaMatchesModel(t *testing.T) {
	const size = 1<<20 + 1000 // a partial last block too
	golden, model := makeGolden(t, size)
	goldenCopy := bytes.Clone(model)
	path := filepath.Join(t.TempDir(), "ep.delta")
	if err := CreateDelta(golden, path); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDelta(path, "", false)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		off := rng.IntN(size)
		n := 1 + rng.IntN(min(size-off, 3*deltaBlockSize))
		switch rng.IntN(10) {
		case 0:
			// Discard: whole blocks read as the golden again.
			if err := d.Discard(int64(off), int64(n)); err != nil {
				t.Fatal(err)
			}
			first := (off + deltaBlockSize - 1) / deltaBlockSize * deltaBlockSize
			end := (off + n) / deltaBlockSize * deltaBlockSize
			if first < end {
				copy(model[first:end], goldenCopy[first:end])
			}
		case 1:
			d.Close()
			if d, err = OpenDelta(path, "", false); err != nil {
				t.Fatal(err)
			}
		default:
			p := make([]byte, n)
			for k := range p {
				p[k] = byte(i + k)
			}
			if _, err := d.WriteAt(p, int64(off)); err != nil {
				t.Fatal(err)
			}
			copy(model[off:], p)
		}
		roff := rng.IntN(size)
		rn := 1 + rng.IntN(min(size-roff, 5*deltaBlockSize))
		got := make([]byte, rn)
		if _, err := d.ReadAt(got, int64(roff)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, model[roff:roff+rn]) {
			t.Fatalf("step %d: read at %d+%d differs", i, roff, rn)
		}
	}
	d.Close()
	after, _ := os.ReadFile(golden)
	if !bytes.Equal(after, goldenCopy) {
		t.Fatal("the golden changed")
	}
	// Flatten gives the same bytes.
	d, _ = OpenDelta(path, "", true)
	flat := filepath.Join(t.TempDir(), "flat.img")
	if err := Flatten(d, flat); err != nil {
		t.Fatal(err)
	}
	d.Close()
	got, _ := os.ReadFile(flat)
	if !bytes.Equal(got, model) {
		t.Fatal("flattened image differs")
	}
}

func TestDeltaRefusesWrongGolden(t *testing.T) {
	golden, data := makeGolden(t, 1<<20)
	path := filepath.Join(t.TempDir(), "ep.delta")
	if err := CreateDelta(golden, path); err != nil {
		t.Fatal(err)
	}
	// Another image of the same size and UUID but other content.
	other := filepath.Join(t.TempDir(), "other.img")
	data[5000]++
	os.WriteFile(other, data, 0o644)
	if _, err := OpenDelta(path, other, false); !errors.Is(err, ErrWrongGolden) {
		t.Fatalf("opened over a different golden: %v", err)
	}
	// Another size.
	os.WriteFile(other, data[:len(data)-4096], 0o644)
	if _, err := OpenDelta(path, other, false); !errors.Is(err, ErrWrongGolden) {
		t.Fatalf("opened over a smaller golden: %v", err)
	}
	// The golden written after the clone.
	os.Chmod(golden, 0o644)
	f, _ := os.OpenFile(golden, os.O_RDWR, 0)
	f.WriteAt([]byte{1, 2, 3}, 1024+0x30) // s_wtime
	f.Close()
	if _, err := OpenDelta(path, "", false); !errors.Is(err, ErrWrongGolden) {
		t.Fatalf("opened over a golden written since: %v", err)
	}
	// A damaged header.
	f, _ = os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte{0xFF}, 0x20)
	f.Close()
	if _, err := OpenDelta(path, "", false); err == nil {
		t.Fatal("opened a delta with a damaged header")
	}
}

func TestCloneRefusesExisting(t *testing.T) {
	golden, _ := makeGolden(t, 1<<20)
	ep := filepath.Join(t.TempDir(), "ep")
	if _, err := Clone(golden, ep); err != nil {
		t.Fatal(err)
	}
	if _, err := Clone(golden, ep); err == nil {
		t.Fatal("Clone overwrote an existing episode")
	}
	if _, err := Clone(ep, ep+"2"); err == nil {
		t.Fatal("Clone chained a delta")
	}
}
