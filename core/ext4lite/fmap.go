package ext4lite

import (
	"sort"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// fileMap is a file's logical-to-physical block map in memory: the leaf
// extents of its extent tree, plus where the tree's blocks are. Changes are
// made to exts and written back by writeFileMap, which keeps the tree packed
// (every node full but the last of its level, as shallow as possible) — the
// shape e2fsck never offers to optimize.
type fileMap struct {
	exts []disk.Extent
	// depth is the on-disk tree depth; levels[0] are the leaf blocks and
	// levels[depth-1] the blocks the root points at.
	depth  int
	levels [][]uint64
	// packed says the on-disk layout is what writeFileMap produces for
	// the extents before dirtyFrom.
	packed bool
	// dirtyFrom is the first extent index changed since the tree was
	// written, or -1.
	dirtyFrom int
	// blockmap says the file is mapped by indirect blocks (ext2/3 style):
	// indirect lists those blocks. Such files are converted to extents
	// before their first change.
	blockmap bool
	indirect []uint64
}

// maxExtentLen is the longest extent of the given kind.
func maxExtentLen(uninit bool) uint32 {
	if uninit {
		return disk.MaxUninitExtentLen
	}
	return disk.MaxInitExtentLen
}

func (m *fileMap) touch(i int) {
	if m.dirtyFrom < 0 || i < m.dirtyFrom {
		m.dirtyFrom = i
	}
}

// find returns the index of the first extent ending after lblk, and whether
// it contains lblk.
func (m *fileMap) find(lblk uint64) (int, bool) {
	i := sort.Search(len(m.exts), func(i int) bool { return m.exts[i].End() > lblk })
	return i, i < len(m.exts) && uint64(m.exts[i].Logical) <= lblk
}

// mapping describes a run of logical blocks in the same state.
type mapping struct {
	physical uint64 // 0 for holes
	n        uint64
	uninit   bool
}

// lookup maps logical block lblk: the run starting there, at most max
// blocks long.
func (m *fileMap) lookup(lblk, max uint64) mapping {
	if lblk >= disk.MaxLogicalBlock {
		return mapping{n: max} // past what extents can map (a corrupt size)
	}
	i, ok := m.find(lblk)
	if !ok {
		end := uint64(disk.MaxLogicalBlock)
		if i < len(m.exts) {
			end = uint64(m.exts[i].Logical)
		}
		return mapping{n: min(max, end-lblk)}
	}
	e := m.exts[i]
	off := lblk - uint64(e.Logical)
	return mapping{physical: e.Physical + off, n: min(max, uint64(e.Len)-off), uninit: e.Uninit}
}

// lastPhysical returns the physical block after the mapping that ends at or
// before lblk, a good allocation goal for extending the file there; 0 if
// none.
func (m *fileMap) goalFor(lblk uint64) uint64 {
	i := sort.Search(len(m.exts), func(i int) bool { return uint64(m.exts[i].Logical) > lblk })
	if i == 0 {
		if len(m.exts) > 0 {
			return m.exts[0].Physical
		}
		return 0
	}
	e := m.exts[i-1]
	if lblk >= uint64(e.Logical) {
		return e.Physical + (lblk - uint64(e.Logical))
	}
	return e.Physical + uint64(e.Len)
}

// mappedBlocks counts the blocks the extents map.
func (m *fileMap) mappedBlocks() uint64 {
	var n uint64
	for _, e := range m.exts {
		n += uint64(e.Len)
	}
	return n
}

// insert maps the hole [e.Logical, e.End()) to e.Physical, merging with
// neighbours where possible.
func (m *fileMap) insert(e disk.Extent) {
	for e.Len > maxExtentLen(e.Uninit) {
		part := e
		part.Len = maxExtentLen(e.Uninit)
		m.insert(part)
		e.Logical += part.Len
		e.Physical += uint64(part.Len)
		e.Len -= part.Len
	}
	i, _ := m.find(uint64(e.Logical))
	m.exts = append(m.exts, disk.Extent{})
	copy(m.exts[i+1:], m.exts[i:])
	m.exts[i] = e
	m.touch(max(i-1, 0))
	m.mergeAround(i, i+1)
}

// canMerge reports whether a and b (a before b) can become one extent.
func canMerge(a, b disk.Extent) bool {
	return a.End() == uint64(b.Logical) && a.Physical+uint64(a.Len) == b.Physical &&
		a.Uninit == b.Uninit && a.Len+b.Len <= maxExtentLen(a.Uninit)
}

// mergeAround merges mergeable neighbours among exts[lo-1:hi+1].
func (m *fileMap) mergeAround(lo, hi int) {
	i := max(lo-1, 0)
	end := min(hi+1, len(m.exts))
	for i+1 < end {
		if canMerge(m.exts[i], m.exts[i+1]) {
			m.exts[i].Len += m.exts[i+1].Len
			m.exts = append(m.exts[:i+1], m.exts[i+2:]...)
			end--
			m.touch(i)
			continue
		}
		i++
	}
}

// remove unmaps [start, end) and returns the physical runs that were
// mapped there.
func (m *fileMap) remove(start, end uint64) []blockRange {
	if start >= end {
		return nil
	}
	i, _ := m.find(start)
	j := i
	var freed []blockRange
	var keep []disk.Extent
	for j < len(m.exts) && uint64(m.exts[j].Logical) < end {
		e := m.exts[j]
		os, oe := max(start, uint64(e.Logical)), min(end, e.End())
		freed = append(freed, blockRange{e.Physical + (os - uint64(e.Logical)), oe - os})
		if uint64(e.Logical) < os {
			head := e
			head.Len = uint32(os - uint64(e.Logical))
			keep = append(keep, head)
		}
		if oe < e.End() {
			tail := e
			tail.Logical = uint32(oe)
			tail.Physical = e.Physical + (oe - uint64(e.Logical))
			tail.Len = uint32(e.End() - oe)
			keep = append(keep, tail)
		}
		j++
	}
	if i == j {
		return nil
	}
	m.replace(i, j, keep)
	return freed
}

// replace swaps exts[i:j] for repl.
func (m *fileMap) replace(i, j int, repl []disk.Extent) {
	tail := append([]disk.Extent(nil), m.exts[j:]...)
	m.exts = append(append(m.exts[:i], repl...), tail...)
	m.touch(max(i-1, 0))
}

// setInit marks the mapped blocks of [start, end) initialized, returning
// the physical runs that were unwritten.
func (m *fileMap) setInit(start, end uint64) []blockRange { return m.setState(start, end, false) }

// setUninit marks the mapped blocks of [start, end) unwritten (they read
// as zeros), returning the physical runs that were written.
func (m *fileMap) setUninit(start, end uint64) []blockRange { return m.setState(start, end, true) }

// setState sets the unwritten state of the mapped blocks in [start, end),
// splitting extents at the range ends, and returns the physical runs that
// changed.
func (m *fileMap) setState(start, end uint64, uninit bool) []blockRange {
	i, _ := m.find(start)
	j := i
	var conv []blockRange
	var repl []disk.Extent
	changed := false
	for j < len(m.exts) && uint64(m.exts[j].Logical) < end {
		e := m.exts[j]
		j++
		if e.Uninit == uninit {
			repl = append(repl, e)
			continue
		}
		changed = true
		os, oe := max(start, uint64(e.Logical)), min(end, e.End())
		if uint64(e.Logical) < os {
			head := e
			head.Len = uint32(os - uint64(e.Logical))
			repl = append(repl, head)
		}
		mid := disk.Extent{Logical: uint32(os), Len: uint32(oe - os), Physical: e.Physical + (os - uint64(e.Logical)), Uninit: uninit}
		for mid.Len > maxExtentLen(uninit) {
			// An initialized extent can be one block longer than an
			// unwritten one.
			part := mid
			part.Len = maxExtentLen(uninit)
			repl = append(repl, part)
			mid.Logical += part.Len
			mid.Physical += uint64(part.Len)
			mid.Len -= part.Len
		}
		conv = append(conv, blockRange{e.Physical + (os - uint64(e.Logical)), oe - os})
		repl = append(repl, mid)
		if oe < e.End() {
			tail := e
			tail.Logical = uint32(oe)
			tail.Physical = e.Physical + (oe - uint64(e.Logical))
			tail.Len = uint32(e.End() - oe)
			repl = append(repl, tail)
		}
	}
	if !changed {
		return nil
	}
	m.replace(i, j, repl)
	m.mergeAround(i, i+len(repl))
	return conv
}
