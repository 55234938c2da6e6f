package ext4lite

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// zoneRange is a run of metadata blocks [start, end) owned by inode ino: 0
// for the group metadata, the resize inode for the reserved descriptor
// blocks (which it maps), the journal inode for the journal.
type zoneRange struct {
	start, end uint64
	ino        Ino
}

// metaZone is what Linux calls the system zone (block_validity): the
// blocks that hold the filesystem's own metadata, sorted and disjoint. No
// file's data, tree or attribute block may lie in it: a map that says
// otherwise would have reads return metadata as file data and writes
// overwrite it.
type metaZone []zoneRange

// buildMetaZone computes the zone of the group metadata: block 0 up to the
// primary superblock, each superblock copy with its descriptor table and
// reserve, and each group's bitmaps and inode table. openJournal adds the
// journal. Runs of one owner that touch are merged; where runs of
// different owners overlap (corrupt descriptors), the union belongs to no
// inode.
//
// Preconditions: the groups are loaded.
func (fs *FS) buildMetaZone() {
	g := &fs.geo
	rs := []zoneRange{{start: 0, end: g.sbBlock + 1}}
	for grp := range g.groups {
		if g.hasSuper(grp) {
			start := g.groupStart(grp)
			gdtEnd := start + 1 + uint64(g.gdtBlocks)
			rs = append(rs, zoneRange{start: start, end: gdtEnd})
			if g.reservedGdt > 0 {
				rs = append(rs, zoneRange{start: gdtEnd, end: gdtEnd + uint64(g.reservedGdt), ino: disk.ResizeIno})
			}
		}
		d := fs.groups[grp].desc
		rs = append(rs,
			zoneRange{start: d.BlockBitmap(), end: d.BlockBitmap() + 1},
			zoneRange{start: d.InodeBitmap(), end: d.InodeBitmap() + 1},
			zoneRange{start: d.InodeTable(), end: d.InodeTable() + uint64(g.itableBlocks)})
	}
	slices.SortFunc(rs, func(a, b zoneRange) int { return cmp.Compare(a.start, b.start) })
	z := rs[:1]
	for _, r := range rs[1:] {
		last := &z[len(z)-1]
		if r.start < last.end || r.start == last.end && r.ino == last.ino {
			if r.ino != last.ino && r.start < last.end {
				last.ino = 0
			}
			last.end = max(last.end, r.end)
			continue
		}
		z = append(z, r)
	}
	fs.zone = z
}

// noOwner is the owner, for badBlocks, of blocks being allocated: no
// metadata is theirs.
const noOwner = ^Ino(0)

// addJournalZone adds the journal's blocks, m's extents, to the zone.
// fileMapOf checked them against the group metadata as it loaded them.
func (fs *FS) addJournalZone(ino Ino, m *fileMap) {
	for _, e := range m.exts {
		fs.zone = append(fs.zone, zoneRange{start: e.Physical, end: e.Physical + uint64(e.Len), ino: ino})
	}
	slices.SortFunc(fs.zone, func(a, b zoneRange) int { return cmp.Compare(a.start, b.start) })
}

// badBlocks says why inode ino may not map blocks [start, start+n): they
// lie beyond the filesystem's end or in metadata ino does not own. It
// returns "" if they are fine.
func (fs *FS) badBlocks(ino Ino, start, n uint64) string {
	end := start + n
	if end > fs.geo.blocksCount || end < start {
		return fmt.Sprintf("blocks %d-%d, beyond the filesystem's last block %d", start, start+n-1, fs.geo.blocksCount-1)
	}
	z := fs.zone
	for i := sort.Search(len(z), func(i int) bool { return z[i].end > start }); i < len(z) && z[i].start < end; i++ {
		if z[i].ino != ino {
			return fmt.Sprintf("blocks %d-%d, which hold %s", start, end-1, fs.describeMeta(max(start, z[i].start), min(end, z[i].end)))
		}
	}
	return ""
}

// describeMeta names the metadata the first block of [start, end) holds,
// for an error.
func (fs *FS) describeMeta(start, end uint64) string {
	g := &fs.geo
	in := func(b, n uint64) bool { return start < b+n && b < end }
	if in(0, g.sbBlock+1) {
		return "the superblock"
	}
	for grp := range g.groups {
		if n := g.superOverhead(grp); n > 0 && in(g.groupStart(grp), uint64(n)) {
			return fmt.Sprintf("group %d's superblock copy, descriptor table or its reserve", grp)
		}
		d := fs.groups[grp].desc
		switch {
		case in(d.BlockBitmap(), 1):
			return fmt.Sprintf("group %d's block bitmap (block %d)", grp, d.BlockBitmap())
		case in(d.InodeBitmap(), 1):
			return fmt.Sprintf("group %d's inode bitmap (block %d)", grp, d.InodeBitmap())
		case in(d.InodeTable(), uint64(g.itableBlocks)):
			return fmt.Sprintf("group %d's inode table (blocks %d-%d)", grp, d.InodeTable(), d.InodeTable()+uint64(g.itableBlocks)-1)
		}
	}
	return "the journal"
}
