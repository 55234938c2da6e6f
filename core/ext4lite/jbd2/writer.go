package jbd2

import (
	"fmt"
	"time"
)

// Block is one filesystem block to journal.
type Block struct {
	FSBlock uint64
	Data    []byte
}

// Writer appends transactions to a journal, one at a time. It never wraps
// the log: when a transaction does not fit between the head and the end,
// the caller checkpoints everything and calls Reset, which restarts the log
// at its first block.
//
// A transaction is written as WriteBody (descriptor, data and revoke
// blocks), then — once the caller has made those and the file data they
// describe durable — WriteCommit. Before the first transaction after a
// Reset becomes durable, MarkStart must make the superblock point at it.
type Writer struct {
	log  Log
	sb   *Superblock
	bs   int
	seed uint32
	// head is the next log block to write.
	head uint32
	// seq is the ID of the transaction being written.
	seq uint32
	// txStart is where the transaction being written began.
	txStart uint32
}

// NewWriter takes over an empty (recovered or clean) journal. nextSeq is
// the first transaction ID to use; after a recovery it must be past every ID
// in the log (Recovery.NextSequence + 1, as the kernel does, so stale
// commit blocks can never match). The journal superblock is rewritten with
// the features the writer uses: revoke records, 64-bit block numbers when
// is64, and checksum v3 when csum. Nothing is synced.
func NewWriter(log Log, sb *Superblock, nextSeq uint32, is64, csum bool) (*Writer, error) {
	if sb.BlockType() != BlockSuperV2 {
		return nil, fmt.Errorf("jbd2: version 1 journal superblock: recreate the journal with tune2fs")
	}
	inc := sb.Incompat()&^(IncompatCsumV2|IncompatAsyncCommit) | IncompatRevoke
	if is64 {
		inc |= Incompat64Bit
	}
	if csum {
		inc |= IncompatCsumV3
		sb[jsChecksumType] = ChecksumCrc32c
	} else {
		inc &^= IncompatCsumV3
	}
	sb.SetIncompat(inc)
	// v1 transaction checksums are superseded by v3.
	be.PutUint32(sb[jsCompat:], sb.Compat()&^CompatChecksum)
	w := &Writer{log: log, sb: sb, bs: int(sb.BlockSize()), seed: sb.CsumSeed(), seq: nextSeq}
	if err := w.Reset(); err != nil {
		return nil, err
	}
	return w, nil
}

// Sequence is the ID of the next transaction.
func (w *Writer) Sequence() uint32 { return w.seq }

// Empty reports whether the on-disk superblock says the log is empty.
func (w *Writer) Empty() bool { return w.sb.Start() == 0 }

// Capacity is the most blocks one transaction can take.
func (w *Writer) Capacity() int { return int(w.sb.Last() - w.sb.First()) }

func (w *Writer) tagsPerDescriptor() int {
	tb := w.sb.TagBytes()
	room := w.bs - headerSize
	if w.sb.HasCsumV2or3() {
		room -= tailSize
	}
	return 1 + (room-tb-uuidSize)/tb
}

func (w *Writer) revokesPerBlock() int {
	room := w.bs - revokeHeaderSize
	if w.sb.HasCsumV2or3() {
		room -= tailSize
	}
	return room / w.recordLen()
}

func (w *Writer) recordLen() int {
	if w.sb.Incompat()&Incompat64Bit != 0 {
		return 8
	}
	return 4
}

// BlocksNeeded is how many log blocks a transaction of n blocks and r
// revoke records takes, commit block included.
func (w *Writer) BlocksNeeded(n, r int) int {
	per := w.tagsPerDescriptor()
	rp := w.revokesPerBlock()
	return n + (n+per-1)/per + (r+rp-1)/rp + 1
}

// Fits reports whether such a transaction fits before the end of the log.
func (w *Writer) Fits(n, r int) bool {
	return uint64(w.head)+uint64(w.BlocksNeeded(n, r)) <= uint64(w.sb.Last())
}

// Reset restarts the log at its first block and writes the superblock
// marking the journal empty. Every committed transaction must have been
// checkpointed (and synced) first.
func (w *Writer) Reset() error {
	w.head = w.sb.First()
	w.sb.SetStart(0)
	w.sb.SetSequence(w.seq)
	return w.writeSuper()
}

// MarkStart points the superblock at the transaction being written, so a
// replay finds it. Needed once after each Reset, before the first commit
// block is synced.
func (w *Writer) MarkStart() error {
	w.sb.SetStart(w.txStart)
	w.sb.SetSequence(w.seq)
	return w.writeSuper()
}

func (w *Writer) writeSuper() error {
	w.sb.UpdateChecksum()
	buf := make([]byte, w.bs)
	if err := w.log.ReadBlock(0, buf); err != nil {
		return fmt.Errorf("jbd2: read journal superblock: %w", err)
	}
	copy(buf, w.sb[:])
	if err := w.log.WriteBlock(0, buf); err != nil {
		return fmt.Errorf("jbd2: write journal superblock: %w", err)
	}
	return nil
}

// WriteBody writes the descriptor, data and revoke blocks of the next
// transaction at the head of the log, in one write.
//
// Preconditions: w.Fits(len(blocks), len(revokes)).
func (w *Writer) WriteBody(blocks []Block, revokes []uint64) error {
	if !w.Fits(len(blocks), len(revokes)) {
		return fmt.Errorf("jbd2: transaction of %d blocks does not fit the log", len(blocks))
	}
	w.txStart = w.head
	csum := w.sb.HasCsumV2or3()
	tb := w.sb.TagBytes()
	per := w.tagsPerDescriptor()
	uuid := w.sb.UUID()
	body := make([]byte, (w.BlocksNeeded(len(blocks), len(revokes))-1)*w.bs)
	pos := 0 // next block of body
	next := func() []byte {
		b := body[pos*w.bs : (pos+1)*w.bs]
		pos++
		return b
	}
	for len(blocks) > 0 {
		chunk := blocks[:min(per, len(blocks))]
		blocks = blocks[len(chunk):]
		desc := next()
		putHeader(desc, BlockDescriptor, w.seq)
		off := headerSize
		for i, b := range chunk {
			data := next()
			copy(data, b.Data)
			t := tag{block: b.FSBlock}
			if be.Uint32(data[0:]) == Magic {
				// Escape blocks that would look like journal blocks.
				be.PutUint32(data[0:], 0)
				t.flags |= FlagEscape
			}
			if i > 0 {
				t.flags |= FlagSameUUID
			}
			if i == len(chunk)-1 {
				t.flags |= FlagLastTag
			}
			if csum {
				t.checksum = tagCsum(w.seed, w.seq, data)
			}
			w.sb.putTag(desc[off:], t)
			off += tb
			if i == 0 {
				copy(desc[off:], uuid[:])
				off += uuidSize
			}
		}
		if csum {
			be.PutUint32(desc[w.bs-tailSize:], blockTailCsum(desc, w.seed))
		}
	}
	rl := w.recordLen()
	rp := w.revokesPerBlock()
	for len(revokes) > 0 {
		chunk := revokes[:min(rp, len(revokes))]
		revokes = revokes[len(chunk):]
		rb := next()
		putHeader(rb, BlockRevoke, w.seq)
		off := revokeHeaderSize
		for _, blk := range chunk {
			if rl == 8 {
				be.PutUint64(rb[off:], blk)
			} else {
				be.PutUint32(rb[off:], uint32(blk))
			}
			off += rl
		}
		be.PutUint32(rb[12:], uint32(off))
		if csum {
			be.PutUint32(rb[w.bs-tailSize:], blockTailCsum(rb, w.seed))
		}
	}
	if err := w.log.WriteBlock(w.head, body[:pos*w.bs]); err != nil {
		return fmt.Errorf("jbd2: write log blocks %d+%d: %w", w.head, pos, err)
	}
	w.head += uint32(pos)
	return nil
}

// WriteCommit writes the commit block of the transaction WriteBody wrote;
// once it is durable the transaction is.
func (w *Writer) WriteCommit(now time.Time) error {
	b := make([]byte, w.bs)
	putHeader(b, BlockCommit, w.seq)
	be.PutUint64(b[commitSecOff:], uint64(now.Unix()))
	be.PutUint32(b[commitNsecOff:], uint32(now.Nanosecond()))
	if w.sb.HasCsumV2or3() {
		be.PutUint32(b[commitChecksumOff:], commitCsum(b, w.seed))
	}
	if err := w.log.WriteBlock(w.head, b); err != nil {
		return fmt.Errorf("jbd2: write commit block %d: %w", w.head, err)
	}
	w.head++
	w.seq++
	return nil
}
