package ext4lite

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"time"

	"gvisor.dev/gvisor/pkg/cleanup"

	"z.gfire.dev/gvx/core/ext4lite/blockdev"
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// MkfsOptions tune Mkfs. The zero value gives mkfs.ext4's defaults
// (e2fsprogs 1.47) with 4 KiB blocks.
type MkfsOptions struct {
	// InodeRatio is bytes per inode (default by size, as mke2fs: 4096
	// below 512 MiB, 16384 up to 4 TiB, 32768 up to 16 TiB, 65536 above).
	InodeRatio int
	// UUID of the filesystem; random if zero.
	UUID [16]byte
	// Label is the volume name (at most 16 bytes).
	Label string
	// Now is the creation time; time.Now if zero.
	Now time.Time
	// Root owns the root directory.
	Root Owner
	// JournalBlocks overrides the journal size; mke2fs's default if 0.
	JournalBlocks uint32
	// Zeroed says the device reads as zeros (a fresh sparse file), so
	// inode tables and the journal need not be written.
	Zeroed bool
}

// Mkfs constants.
const (
	mkfsBlockSize    = 4096
	mkfsInodeSize    = 256
	mkfsExtraIsize   = 32
	mkfsFlexLog      = 4
	mkfsReservedPct  = 5
	mkfsLostFoundLen = 4 // blocks: mke2fs grows lost+found to 16 KiB
	minMkfsBlocks    = 2048
)

const mkfsCompat = disk.CompatHasJournal | disk.CompatExtAttr | disk.CompatResizeInode | disk.CompatDirIndex
const mkfsIncompat = disk.IncompatFiletype | disk.IncompatExtents | disk.Incompat64Bit | disk.IncompatFlexBG
const mkfsRoCompat = disk.RoCompatSparseSuper | disk.RoCompatLargeFile | disk.RoCompatHugeFile |
	disk.RoCompatDirNlink | disk.RoCompatExtraIsize | disk.RoCompatMetadataCsum

// Create makes a sparse file of size bytes at path holding a new, empty
// filesystem with mkfs.ext4's defaults. path must not exist.
func Create(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("ext4lite: create volume: %w", err)
	}
	cu := cleanup.Make(func() {
		f.Close()
		os.Remove(path)
	})
	defer cu.Clean()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("ext4lite: size volume: %w", err)
	}
	dev, err := blockdev.NewFile(f, false)
	if err != nil {
		return err
	}
	if err := Mkfs(dev, MkfsOptions{Zeroed: true}); err != nil {
		return err
	}
	if err := dev.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ext4lite: create volume: %w", err)
	}
	cu.Release()
	return nil
}

// mkfsLayout is the computed geometry of a new filesystem.
type mkfsLayout struct {
	sb      *disk.Superblock
	geo     geometry
	descs   []disk.GroupDesc
	bitmaps map[uint32][]byte // block bitmaps of initialized groups
	journal []disk.Extent
	rootBlk uint64
	lpfBlk  uint64
	dindBlk uint64
	now     disk.Timestamp
	used    map[uint32]uint32 // blocks used per group
}

// Mkfs writes a new, empty filesystem over the whole device.
func Mkfs(dev blockdev.Device, opts MkfsOptions) error {
	l, err := planMkfs(dev.Size(), opts)
	if err != nil {
		return err
	}
	return l.write(dev, opts)
}

// defaultInodeRatio follows mke2fs's size classes.
func defaultInodeRatio(size int64) int {
	const mib = 1 << 20
	switch {
	case size < 512*mib:
		return 4096
	case size < 4<<40:
		return 16384
	case size < 16<<40:
		return 32768
	}
	return 65536
}

// defaultJournalBlocks is ext2fs_default_journal_size.
func defaultJournalBlocks(blocks uint64) uint32 {
	switch {
	case blocks < 32768:
		return 1024
	case blocks < 256*1024:
		return 4096
	case blocks < 512*1024:
		return 8192
	case blocks < 4096*1024:
		return 16384
	case blocks < 8192*1024:
		return 32768
	case blocks < 16384*1024:
		return 65536
	case blocks < 32768*1024:
		return 131072
	}
	return 262144
}

func planMkfs(size int64, opts MkfsOptions) (*mkfsLayout, error) {
	bs := uint64(mkfsBlockSize)
	blocks := uint64(size) / bs
	if blocks < minMkfsBlocks {
		return nil, fmt.Errorf("ext4lite: %d bytes is too small for a filesystem (at least %d)", size, minMkfsBlocks*bs)
	}
	if blocks >= 1<<32 {
		// More needs 64-bit group math everywhere and a deeper look at
		// mke2fs's huge-filesystem choices.
		return nil, fmt.Errorf("ext4lite: %d bytes is too large (at most 16 TiB)", size)
	}
	ratio := opts.InodeRatio
	if ratio == 0 {
		ratio = defaultInodeRatio(size)
	}
	bpg := uint32(8 * bs)
	descPerBlock := uint32(bs / disk.MinDescSize64Bit)
	var groups, ipg, itb, descBlocks, rsv uint32
	// The inode count follows the device size, even if the last group
	// is dropped below (as mke2fs does).
	inodes := blocks * bs / uint64(ratio)
	for {
		groups = uint32((blocks + uint64(bpg) - 1) / uint64(bpg))
		descBlocks = (groups + descPerBlock - 1) / descPerBlock
		ipg = uint32((inodes + uint64(groups) - 1) / uint64(groups))
		ipg = min(ipg, 8*uint32(bs))
		itb = (ipg*mkfsInodeSize + uint32(bs) - 1) / uint32(bs)
		ipg = itb * uint32(bs) / mkfsInodeSize
		ipg &^= 7
		itb = (ipg*mkfsInodeSize + uint32(bs) - 1) / uint32(bs)
		if ipg*groups < disk.GoodOldFirstIno+1 {
			return nil, fmt.Errorf("ext4lite: too few inodes")
		}
		rsv = reservedGdtBlocks(blocks, bpg, descPerBlock, descBlocks, uint32(bs))
		// Drop a last group too small for its own metadata.
		rem := uint32(blocks % uint64(bpg))
		last := groups - 1
		overhead := 2 + itb
		if hasSuperSparse(last) {
			overhead += 1 + descBlocks + rsv
		}
		if rem != 0 && rem < overhead+50 {
			if groups == 1 {
				return nil, fmt.Errorf("ext4lite: %d bytes is too small for a filesystem", size)
			}
			blocks -= uint64(rem)
			continue
		}
		break
	}
	l := &mkfsLayout{bitmaps: map[uint32][]byte{}, used: map[uint32]uint32{}}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	l.now = disk.Timestamp{Sec: now.Unix()}
	sb := new(disk.Superblock)
	l.sb = sb
	initSuper(sb, blocks, groups, ipg, rsv, opts, now)
	l.geo = newGeometry(sb)
	if err := l.placeMetadata(); err != nil {
		return nil, err
	}
	jblocks := opts.JournalBlocks
	if jblocks == 0 {
		jblocks = defaultJournalBlocks(blocks)
	}
	if err := l.placeJournal(jblocks); err != nil {
		return nil, err
	}
	var err error
	if l.rootBlk, err = l.alloc(0, 1); err != nil {
		return nil, err
	}
	if l.lpfBlk, err = l.alloc(0, mkfsLostFoundLen); err != nil {
		return nil, err
	}
	// The resize inode exists with the feature even if nothing is
	// reserved: e2fsck insists on its double indirect block.
	if l.dindBlk, err = l.alloc(0, 1); err != nil {
		return nil, err
	}
	return l, nil
}

func hasSuperSparse(grp uint32) bool {
	g := geometry{sparseSuper: true}
	return g.hasSuper(grp)
}

// reservedGdtBlocks reserves room to grow the group descriptor table to
// 1024 times the filesystem (or 2^32 blocks), as mke2fs does.
func reservedGdtBlocks(blocks uint64, bpg, descPerBlock, descBlocks, bs uint32) uint32 {
	maxBlocks := uint64(0xFFFFFFFF)
	if blocks < maxBlocks/1024 {
		maxBlocks = blocks * 1024
	}
	rsvGroups := (maxBlocks + uint64(bpg) - 1) / uint64(bpg)
	rsv := uint32((rsvGroups+uint64(descPerBlock)-1)/uint64(descPerBlock)) - descBlocks
	return min(rsv, bs/4)
}

func initSuper(sb *disk.Superblock, blocks uint64, groups, ipg, rsv uint32, opts MkfsOptions, now time.Time) {
	le := binary.LittleEndian
	p32 := func(off int, v uint32) { le.PutUint32(sb[off:], v) }
	p16 := func(off int, v uint16) { le.PutUint16(sb[off:], v) }
	p32(0x0, ipg*groups)
	sb.SetBlocksCountRaw(blocks)
	sb.SetRBlocksCountRaw(blocks * mkfsReservedPct / 100)
	p32(0x18, 2) // log block size: 4096
	p32(0x1C, 2)
	p32(0x20, 8*mkfsBlockSize)
	p32(0x24, 8*mkfsBlockSize)
	p32(0x28, ipg)
	p32(0x30, uint32(now.Unix()))
	p16(0x36, 0xFFFF) // max mount count -1
	p16(0x38, disk.SuperMagic)
	p16(0x3A, disk.StateValid)
	p16(0x3C, disk.ErrorsContinue)
	p32(0x40, uint32(now.Unix()))
	p32(0x4C, disk.RevDynamic)
	p32(0x54, disk.GoodOldFirstIno)
	p16(0x58, mkfsInodeSize)
	p32(0x5C, mkfsCompat)
	p32(0x60, mkfsIncompat)
	p32(0x64, mkfsRoCompat)
	uuid := opts.UUID
	if uuid == [16]byte{} {
		uuid = randomUUID()
	}
	sb.SetUUID(uuid)
	copy(sb[0x78:0x88], opts.Label)
	p16(0xCE, uint16(rsv))
	p32(0xE0, disk.JournalIno)
	seed := randomUUID()
	copy(sb[0xEC:0xFC], seed[:])
	sb[0xFC] = disk.HashHalfMD4
	sb[0xFD] = disk.JnlBackupBlocks
	p16(0xFE, disk.MinDescSize64Bit)
	p32(0x100, disk.DefaultMountUser|disk.DefaultMountACL)
	p32(0x108, uint32(now.Unix()))
	p16(0x15C, mkfsExtraIsize)
	p16(0x15E, mkfsExtraIsize)
	// Directory hashes follow the signedness of char, which mke2fs
	// records for the kernel.
	switch runtime.GOARCH {
	case "amd64", "386", "mips", "mipsle", "mips64", "mips64le", "loong64", "sparc64":
		p32(0x160, disk.FlagsSignedHash)
	default:
		p32(0x160, disk.FlagsUnsignedHash)
	}
	sb[0x174] = mkfsFlexLog
	sb[0x175] = disk.ChecksumTypeCrc32c
}

func randomUUID() [16]byte {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0F | 0x40
	u[8] = u[8]&0x3F | 0x80
	return u
}

// markUsed records blocks [b, b+n) as used.
func (l *mkfsLayout) markUsed(b uint64, n uint64) {
	g := &l.geo
	for k := uint64(0); k < n; k++ {
		grp := g.groupOfBlock(b + k)
		bm := l.bitmap(grp)
		setBit(bm, uint32(b+k-g.groupStart(grp)))
		l.used[grp]++
	}
}

// bitmap returns (creating) group grp's block bitmap.
func (l *mkfsLayout) bitmap(grp uint32) []byte {
	if bm, ok := l.bitmaps[grp]; ok {
		return bm
	}
	g := &l.geo
	bm := make([]byte, g.blockSize)
	for i := range g.superOverhead(grp) {
		setBit(bm, i)
	}
	for i := g.blocksInGroup(grp); i < uint32(g.blockSize)*8; i++ {
		setBit(bm, i)
	}
	l.used[grp] += g.superOverhead(grp)
	l.bitmaps[grp] = bm
	return bm
}

func (l *mkfsLayout) isUsed(b uint64) bool {
	g := &l.geo
	grp := g.groupOfBlock(b)
	off := uint32(b - g.groupStart(grp))
	if bm, ok := l.bitmaps[grp]; ok {
		return testBit(bm, off)
	}
	return off < g.superOverhead(grp)
}

// alloc finds n contiguous free blocks from goal on and marks them used.
func (l *mkfsLayout) alloc(goal uint64, n uint64) (uint64, error) {
	g := &l.geo
	for start := goal; start+n <= g.blocksCount; {
		ok := true
		for k := uint64(0); k < n; k++ {
			if l.isUsed(start + k) {
				start += k + 1
				ok = false
				break
			}
		}
		if ok {
			l.markUsed(start, n)
			return start, nil
		}
	}
	return 0, fmt.Errorf("ext4lite: mkfs: no room for %d contiguous blocks", n)
}

// placeMetadata packs each flex group's bitmaps and inode tables at the
// start of its first group: block bitmaps, inode bitmaps, inode tables.
func (l *mkfsLayout) placeMetadata() error {
	g := &l.geo
	l.descs = make([]disk.GroupDesc, g.groups)
	for grp := range g.groups {
		l.descs[grp] = make(disk.GroupDesc, g.descSize)
	}
	for first := uint32(0); first < g.groups; first += g.groupsPerFlex {
		c := min(g.groupsPerFlex, g.groups-first)
		// mke2fs spaces the three runs by the number of groups in the
		// flex group, except that a lone last group is spaced like a full
		// flex group; the gaps stay free.
		off := c
		if c == 1 {
			off = g.groupsPerFlex
		}
		start := g.groupStart(first) + uint64(g.superOverhead(first))
		end := start + uint64(2*off) + uint64(c)*uint64(g.itableBlocks)
		if end > g.groupStart(first)+uint64(g.blocksInGroup(first)) {
			return fmt.Errorf("ext4lite: mkfs: the metadata of %d groups does not fit one group; use a larger inode ratio", c)
		}
		l.markUsed(start, uint64(c))
		l.markUsed(start+uint64(off), uint64(c))
		l.markUsed(start+uint64(2*off), uint64(c)*uint64(g.itableBlocks))
		for k := range c {
			d := l.descs[first+k]
			d.SetBlockBitmap(start + uint64(k))
			d.SetInodeBitmap(start + uint64(off+k))
			d.SetInodeTable(start + uint64(2*off) + uint64(k)*uint64(g.itableBlocks))
		}
	}
	return nil
}

// placeJournal allocates the journal, contiguously if possible, from the
// middle of the filesystem as mke2fs does.
func (l *mkfsLayout) placeJournal(jblocks uint32) error {
	g := &l.geo
	grp := g.groupOfBlock((g.blocksCount - g.firstData) / 2)
	if g.groups > g.groupsPerFlex {
		grp &^= g.groupsPerFlex - 1
	}
	goal := g.groupStart(grp)
	left := uint64(jblocks)
	logical := uint32(0)
	for left > 0 {
		n := min(left, disk.MaxInitExtentLen)
		start, err := l.alloc(goal, n)
		if err != nil {
			// Fragment if the middle is too crowded.
			if start, err = l.alloc(g.firstData, 1); err != nil {
				return err
			}
			n = 1
		}
		if k := len(l.journal); k > 0 && l.journal[k-1].Physical+uint64(l.journal[k-1].Len) == start && uint64(l.journal[k-1].Len)+n <= disk.MaxInitExtentLen {
			l.journal[k-1].Len += uint32(n)
		} else {
			l.journal = append(l.journal, disk.Extent{Logical: logical, Len: uint32(n), Physical: start})
		}
		logical += uint32(n)
		left -= n
		goal = start + n
	}
	return nil
}
