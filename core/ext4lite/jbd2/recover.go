package jbd2

import (
	"fmt"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Recovery describes what Recover found and did.
type Recovery struct {
	// NextSequence is the first transaction ID not in the log; new
	// transactions must start after it.
	NextSequence uint32
	// Transactions is the number of complete transactions replayed.
	Transactions int
	// Replayed counts blocks written to the filesystem.
	Replayed int
	// Revoked counts journaled blocks skipped because of revoke records.
	Revoked int
	// BadChecksums counts journaled blocks skipped because their tag
	// checksum did not match (the kernel also skips these).
	BadChecksums int
}

// Target receives replayed blocks.
type Target func(fsBlock uint64, data []byte) error

// Recover replays the committed transactions in the journal into target.
// It does not modify the journal; after the caller has made the replayed
// blocks durable it should mark the log empty (Writer.Reset does).
func Recover(log Log, sb *Superblock, target Target) (Recovery, error) {
	r := &recoverer{log: log, sb: sb, bs: int(sb.BlockSize()), revoked: make(map[uint64]uint32)}
	var info Recovery
	if sb.Start() == 0 {
		info.NextSequence = sb.Sequence()
		return info, nil
	}
	end, err := r.pass(passScan, 0, nil)
	if err != nil {
		return info, err
	}
	info.NextSequence = end
	info.Transactions = int(end - sb.Sequence())
	if _, err := r.pass(passRevoke, end, nil); err != nil {
		return info, err
	}
	if _, err := r.pass(passReplay, end, func(blk uint64, data []byte) error {
		info.Replayed++
		return target(blk, data)
	}); err != nil {
		return info, err
	}
	info.Revoked = r.revokeHits
	info.BadChecksums = r.badCsums
	return info, nil
}

type passKind int

const (
	passScan passKind = iota
	passRevoke
	passReplay
)

type recoverer struct {
	log        Log
	sb         *Superblock
	bs         int
	revoked    map[uint64]uint32 // block -> newest revoking transaction
	revokeHits int
	badCsums   int
}

func (r *recoverer) wrap(n uint32) uint32 {
	if n >= r.sb.Last() {
		n -= r.sb.Last() - r.sb.First()
	}
	return n
}

// pass walks the log from s_start. In the scan pass it returns the ID of
// the first transaction without a valid commit block; the other passes stop
// there.
func (r *recoverer) pass(kind passKind, end uint32, target Target) (uint32, error) {
	seq := r.sb.Sequence()
	pos := r.sb.Start()
	buf := make([]byte, r.bs)
	data := make([]byte, r.bs)
	csum := r.sb.HasCsumV2or3()
	seed := r.sb.CsumSeed()
	descTail := 0
	if csum {
		descTail = tailSize
	}
	var crc32Sum uint32 = ^uint32(0)
	// A log cannot hold more blocks than the journal; bound the walk so a
	// corrupt log cannot loop.
	for steps := uint32(0); steps <= r.sb.Last(); steps++ {
		if kind != passScan && !tidGT(end, seq) {
			break
		}
		if err := r.log.ReadBlock(pos, buf); err != nil {
			return 0, fmt.Errorf("jbd2: read log block %d: %w", pos, err)
		}
		pos = r.wrap(pos + 1)
		h, ok := parseHeader(buf)
		if !ok || h.sequence != seq {
			break
		}
		switch h.blockType {
		case BlockDescriptor:
			if csum && be.Uint32(buf[r.bs-tailSize:]) != blockTailCsum(buf, seed) {
				if kind == passScan {
					return seq, nil // a torn or stale descriptor ends the log
				}
				return 0, disk.Corruptf("journal descriptor block checksum changed between passes")
			}
			tags, err := r.tags(buf, descTail)
			if err != nil {
				if kind == passScan {
					return seq, nil
				}
				return 0, err
			}
			if kind == passScan && r.sb.Compat()&CompatChecksum != 0 {
				crc32Sum = crc32Update(crc32Sum, buf)
			}
			for _, t := range tags {
				logBlock := pos
				pos = r.wrap(pos + 1)
				if kind == passScan && r.sb.Compat()&CompatChecksum != 0 {
					if err := r.log.ReadBlock(logBlock, data); err != nil {
						return 0, fmt.Errorf("jbd2: read log block %d: %w", logBlock, err)
					}
					crc32Sum = crc32Update(crc32Sum, data)
				}
				if kind != passReplay {
					continue
				}
				if rs, ok := r.revoked[t.block]; ok && !tidGT(seq, rs) {
					r.revokeHits++
					continue
				}
				if err := r.log.ReadBlock(logBlock, data); err != nil {
					return 0, fmt.Errorf("jbd2: read log block %d: %w", logBlock, err)
				}
				if csum && !r.tagCsumOK(t, seq, data, seed) {
					r.badCsums++
					continue
				}
				if t.flags&FlagEscape != 0 {
					be.PutUint32(data[0:], Magic)
				}
				if err := target(t.block, data); err != nil {
					return 0, err
				}
			}
		case BlockCommit:
			if kind == passScan {
				if !r.commitOK(buf, seed, crc32Sum) {
					return seq, nil
				}
				crc32Sum = ^uint32(0)
			}
			seq++
		case BlockRevoke:
			if csum && be.Uint32(buf[r.bs-tailSize:]) != blockTailCsum(buf, seed) {
				if kind == passScan {
					return seq, nil
				}
				return 0, disk.Corruptf("journal revoke block checksum changed between passes")
			}
			if kind != passRevoke {
				continue
			}
			if err := r.scanRevoke(buf, seq, descTail); err != nil {
				return 0, err
			}
		default:
			return seq, nil
		}
	}
	return seq, nil
}

// tags decodes a descriptor block's tags.
func (r *recoverer) tags(b []byte, descTail int) ([]tag, error) {
	tagBytes := r.sb.TagBytes()
	var out []tag
	off := headerSize
	for off+tagBytes <= r.bs-descTail {
		t := r.sb.parseTag(b[off:])
		off += tagBytes
		if t.flags&FlagSameUUID == 0 {
			off += uuidSize
		}
		out = append(out, t)
		if t.flags&FlagLastTag != 0 {
			break
		}
	}
	if len(out) == 0 {
		return nil, disk.Corruptf("journal descriptor block without tags")
	}
	return out, nil
}

func (r *recoverer) tagCsumOK(t tag, seq uint32, data []byte, seed uint32) bool {
	c := tagCsum(seed, seq, data)
	if r.sb.Incompat()&IncompatCsumV3 != 0 {
		return t.checksum == c
	}
	return t.checksum == c&0xFFFF
}

// commitOK validates a commit block during the scan pass.
func (r *recoverer) commitOK(b []byte, seed, crc32Sum uint32) bool {
	if r.sb.HasCsumV2or3() {
		return be.Uint32(b[commitChecksumOff:]) == commitCsum(b, seed)
	}
	if r.sb.Compat()&CompatChecksum != 0 && b[commitChksumTypeOff] == ChecksumCrc32 {
		ok := be.Uint32(b[commitChecksumOff:]) == crc32Sum
		// With async commit a mismatch is a torn transaction; without,
		// the kernel also stops here.
		return ok
	}
	return true
}

func (r *recoverer) scanRevoke(b []byte, seq uint32, descTail int) error {
	count := int(be.Uint32(b[12:]))
	if count > r.bs-descTail || count < revokeHeaderSize {
		return disk.Corruptf("journal revoke block claims %d bytes", count)
	}
	recLen := 4
	if r.sb.Incompat()&Incompat64Bit != 0 {
		recLen = 8
	}
	for off := revokeHeaderSize; off+recLen <= count; off += recLen {
		var blk uint64
		if recLen == 8 {
			blk = be.Uint64(b[off:])
		} else {
			blk = uint64(be.Uint32(b[off:]))
		}
		if old, ok := r.revoked[blk]; !ok || tidGT(seq, old) {
			r.revoked[blk] = seq
		}
	}
	return nil
}

// crc32Update continues the v1 (COMPAT_CHECKSUM) transaction checksum,
// which is the kernel's crc32_be.
func crc32Update(crc uint32, p []byte) uint32 {
	for _, b := range p {
		crc ^= uint32(b) << 24
		for range 8 {
			if crc&0x80000000 != 0 {
				crc = crc<<1 ^ 0x04C11DB7
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
