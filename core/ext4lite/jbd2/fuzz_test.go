package jbd2

import (
	"bytes"
	"encoding/binary"
	"testing"
)

const fuzzBS = 1024

// memLog is a journal held in memory.
type memLog struct{ blocks [][]byte }

func (l *memLog) ReadBlock(n uint32, p []byte) error {
	if int(n) >= len(l.blocks) {
		clear(p)
		return nil
	}
	copy(p, l.blocks[n])
	return nil
}

func (l *memLog) WriteBlock(n uint32, p []byte) error {
	for ; len(p) > 0; n, p = n+1, p[fuzzBS:] {
		for int(n) >= len(l.blocks) {
			l.blocks = append(l.blocks, make([]byte, fuzzBS))
		}
		copy(l.blocks[n], p[:fuzzBS])
	}
	return nil
}

// sampleJournal writes two transactions (one with a revoke) through the
// Writer and returns the log bytes.
func sampleJournal(csum bool) []byte {
	sb := NewSuperblock(fuzzBS, 32, [16]byte{1, 2, 3})
	log := &memLog{}
	buf := make([]byte, fuzzBS)
	copy(buf, sb[:])
	log.WriteBlock(0, buf)
	w, err := NewWriter(log, sb, 5, true, csum)
	if err != nil {
		panic(err)
	}
	data := bytes.Repeat([]byte{7}, fuzzBS)
	esc := make([]byte, fuzzBS)
	binary.BigEndian.PutUint32(esc, Magic)
	w.WriteBody([]Block{{FSBlock: 100, Data: data}, {FSBlock: 101, Data: esc}}, nil)
	w.MarkStart()
	w.WriteCommit(timeZero)
	w.WriteBody([]Block{{FSBlock: 102, Data: data}}, []uint64{100})
	w.WriteCommit(timeZero)
	var out []byte
	for _, b := range log.blocks {
		out = append(out, b...)
	}
	return out
}

// FuzzRecover replays arbitrary journals: errors are fine, panics and
// endless loops are not.
func FuzzRecover(f *testing.F) {
	f.Add(sampleJournal(true))
	f.Add(sampleJournal(false))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < fuzzBS || len(b) > 64*fuzzBS {
			return
		}
		log := &memLog{}
		for off := 0; off+fuzzBS <= len(b); off += fuzzBS {
			log.blocks = append(log.blocks, b[off:off+fuzzBS])
		}
		sb, err := ParseSuperblock(b, fuzzBS, uint64(len(log.blocks)))
		if err != nil {
			return
		}
		_, _ = Recover(log, sb, func(uint64, []byte) error { return nil })
	})
}
