package jbd2

import (
	"bytes"
	"testing"
	"time"
)

var timeZero = time.Unix(0, 0)

// TestWriterRecoverRoundTrip writes transactions and checks what recovery
// replays: the newest copy of each block, escaped blocks restored, revoked
// blocks skipped, and nothing after a missing commit block.
func TestWriterRecoverRoundTrip(t *testing.T) {
	for _, csum := range []bool{true, false} {
		b := sampleJournal(csum)
		log := &memLog{}
		for off := 0; off+fuzzBS <= len(b); off += fuzzBS {
			log.blocks = append(log.blocks, bytes.Clone(b[off:off+fuzzBS]))
		}
		sb, err := ParseSuperblock(b, fuzzBS, 32)
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint64][]byte{}
		info, err := Recover(log, sb, func(blk uint64, data []byte) error {
			got[blk] = bytes.Clone(data)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if info.Transactions != 2 || info.NextSequence != 7 || info.Revoked != 1 {
			t.Fatalf("csum %v: recovery %+v", csum, info)
		}
		if _, ok := got[100]; ok {
			t.Error("revoked block 100 was replayed")
		}
		if got[101] == nil || be.Uint32(got[101]) != Magic {
			t.Error("escaped block 101 not restored")
		}
		if !bytes.Equal(got[102], bytes.Repeat([]byte{7}, fuzzBS)) {
			t.Error("block 102 not replayed")
		}
		// Without its commit block the second transaction disappears.
		for i, blk := range log.blocks {
			if h, ok := parseHeader(blk); ok && h.blockType == BlockCommit && h.sequence == 6 {
				clear(log.blocks[i])
			}
		}
		got = map[uint64][]byte{}
		info, err = Recover(log, sb, func(blk uint64, data []byte) error {
			got[blk] = data
			return nil
		})
		if err != nil || info.Transactions != 1 || got[102] != nil || got[100] == nil {
			t.Fatalf("csum %v: torn transaction replayed: %+v %v", csum, info, err)
		}
	}
}

// TestRecoverWrappedLog replays a log that wraps from the end of the
// journal to its first block, as the kernel's logs do.
func TestRecoverWrappedLog(t *testing.T) {
	sb := NewSuperblock(fuzzBS, 32, [16]byte{9})
	log := &memLog{}
	buf := make([]byte, fuzzBS)
	copy(buf, sb[:])
	log.WriteBlock(0, buf)
	w, err := NewWriter(log, sb, 40, true, true)
	if err != nil {
		t.Fatal(err)
	}
	// Transaction 40 ends at the last block; 41 continues at block 1.
	w.head = 29
	a := bytes.Repeat([]byte{1}, fuzzBS)
	b := bytes.Repeat([]byte{2}, fuzzBS)
	if err := w.WriteBody([]Block{{FSBlock: 500, Data: a}}, nil); err != nil {
		t.Fatal(err)
	}
	w.MarkStart()
	w.WriteCommit(timeZero)
	if w.head != 32 {
		t.Fatalf("head %d, want the end of the log", w.head)
	}
	w.head = sb.First()
	w.WriteBody([]Block{{FSBlock: 501, Data: b}, {FSBlock: 500, Data: b}}, nil)
	w.WriteCommit(timeZero)
	got := map[uint64][]byte{}
	info, err := Recover(log, sb, func(blk uint64, data []byte) error {
		got[blk] = bytes.Clone(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if info.Transactions != 2 || !bytes.Equal(got[500], b) || !bytes.Equal(got[501], b) {
		t.Fatalf("wrapped log: %+v, block 500 %x..., 501 %x...", info, got[500][:1], got[501][:1])
	}
}
