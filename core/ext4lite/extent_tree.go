package ext4lite

import (
	"bytes"
	"fmt"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

const rootExtentCap = (disk.IBlockSize - disk.ExtentHeaderSize) / disk.ExtentEntrySize

// fileMapOf returns n's block map, loading it on first use.
func (fs *FS) fileMapOf(n *inode) (*fileMap, error) {
	n.loadMu.Lock()
	defer n.loadMu.Unlock()
	if n.fmap != nil {
		return n.fmap, nil
	}
	var m *fileMap
	var err error
	switch {
	case n.raw.Flags()&disk.FlagInlineData != 0:
		m = &fileMap{dirtyFrom: -1} // data lives in the inode
	case n.raw.Flags()&disk.FlagExtents != 0:
		m, err = fs.loadExtentTree(n)
	case n.raw.IsSymlink() && n.raw.Size() < disk.IBlockSize:
		m = &fileMap{dirtyFrom: -1} // fast symlink
	case n.raw.IsReg() || n.raw.IsDir() || n.raw.IsSymlink():
		m, err = fs.loadBlockMap(n)
	default:
		m = &fileMap{dirtyFrom: -1} // devices, fifos, sockets
	}
	if err != nil {
		return nil, fmt.Errorf("inode %d: %w", n.ino, err)
	}
	n.fmap = m
	return m, nil
}

// loadExtentTree reads n's whole extent tree.
func (fs *FS) loadExtentTree(n *inode) (*fileMap, error) {
	root, err := disk.ParseExtentNode(n.raw.IBlock())
	if err != nil {
		return nil, err
	}
	if root.Max != rootExtentCap {
		return nil, corruptf("extent root capacity %d, want %d", root.Max, rootExtentCap)
	}
	m := &fileMap{depth: int(root.Depth), dirtyFrom: -1, packed: false}
	m.levels = make([][]uint64, m.depth)
	seen := make(map[uint64]bool)
	if err := fs.walkExtentNode(n, root, 0, disk.MaxLogicalBlock, m, seen); err != nil {
		return nil, err
	}
	return m, nil
}

// walkExtentNode collects the extents under node, whose entries must map
// logical blocks in [lo, hi).
func (fs *FS) walkExtentNode(n *inode, node *disk.ExtentNode, lo, hi uint64, m *fileMap, seen map[uint64]bool) error {
	if node.Depth == 0 {
		for _, e := range node.Leaves {
			if uint64(e.Logical) < lo || e.End() > hi {
				return corruptf("extent at logical block %d outside its index range %d-%d", e.Logical, lo, hi)
			}
			if why := fs.badBlocks(n.ino, e.Physical, uint64(e.Len)); why != "" {
				return corruptf("the extent at logical block %d maps %s", e.Logical, why)
			}
			if k := len(m.exts); k > 0 && m.exts[k-1].End() > uint64(e.Logical) {
				return corruptf("extents overlap at logical block %d", e.Logical)
			}
			m.exts = append(m.exts, e)
		}
		return nil
	}
	if len(node.Indexes) == 0 {
		return corruptf("empty extent index node at depth %d", node.Depth)
	}
	cap := uint16(disk.ExtentNodeCapacity(fs.geo.blockSize, false))
	for i, idx := range node.Indexes {
		childHi := hi
		if i+1 < len(node.Indexes) {
			childHi = uint64(node.Indexes[i+1].Logical)
		}
		if uint64(idx.Logical) < lo || uint64(idx.Logical) >= childHi && childHi != hi {
			return corruptf("extent index at logical block %d out of order", idx.Logical)
		}
		if why := fs.badBlocks(n.ino, idx.Child, 1); why != "" {
			return corruptf("the extent index at logical block %d points at %s", idx.Logical, why)
		}
		if seen[idx.Child] {
			return corruptf("extent tree block %d referenced twice", idx.Child)
		}
		seen[idx.Child] = true
		b, err := fs.bread(idx.Child)
		if err != nil {
			return err
		}
		child, err := disk.ParseExtentNode(b.data)
		if err != nil {
			return fmt.Errorf("extent block %d: %w", idx.Child, err)
		}
		if child.Depth+1 != node.Depth || child.Max != cap {
			return corruptf("extent block %d has depth %d capacity %d under depth %d", idx.Child, child.Depth, child.Max, node.Depth)
		}
		if fs.verify {
			if err := disk.VerifyExtentBlock(b.data, fs.inodeSeed(n)); err != nil {
				return fmt.Errorf("extent block %d: %w", idx.Child, err)
			}
		}
		m.levels[child.Depth] = append(m.levels[child.Depth], idx.Child)
		if err := fs.walkExtentNode(n, child, uint64(idx.Logical), childHi, m, seen); err != nil {
			return err
		}
	}
	return nil
}

// writeFileMap writes m back as n's extent tree: the root into the inode,
// changed nodes into (reused, newly allocated or freed) tree blocks. The
// tree ends up packed. i_blocks follows the tree blocks.
//
// Preconditions: fs.mu is held exclusively; blocks for new tree nodes were
// reserved.
func (fs *FS) writeFileMap(n *inode, m *fileMap) error {
	if m.dirtyFrom < 0 && m.packed {
		return nil
	}
	leafCap := disk.ExtentNodeCapacity(fs.geo.blockSize, false)
	var counts []int
	if len(m.exts) > rootExtentCap {
		c := (len(m.exts) + leafCap - 1) / leafCap
		counts = append(counts, c)
		for c > rootExtentCap {
			c = (c + leafCap - 1) / leafCap
			counts = append(counts, c)
		}
	}
	if len(counts) > disk.MaxExtentDepth {
		return fmt.Errorf("inode %d: %d extents need a tree deeper than ext4 allows", n.ino, len(m.exts))
	}
	firstLeaf := 0
	if m.packed && m.depth == len(counts) && m.dirtyFrom >= 0 {
		firstLeaf = m.dirtyFrom / leafCap
	}
	goal := uint64(0)
	if len(m.exts) > 0 {
		goal = m.exts[0].Physical
	}
	// Size each level, reusing blocks in order.
	levels := make([][]uint64, len(counts))
	var delta int64
	for lvl := range max(len(counts), len(m.levels)) {
		var have []uint64
		if lvl < len(m.levels) {
			have = m.levels[lvl]
		}
		need := 0
		if lvl < len(counts) {
			need = counts[lvl]
		}
		for k := need; k < len(have); k++ {
			if err := fs.freeBlockRange(have[k], 1); err != nil {
				return err
			}
			delta--
		}
		if need == 0 {
			continue
		}
		blocks := append([]uint64(nil), have[:min(need, len(have))]...)
		for len(blocks) < need {
			if len(blocks) > 0 {
				goal = blocks[len(blocks)-1] + 1
			}
			blk, err := fs.allocBlock(goal)
			if err != nil {
				return err
			}
			fs.bnew(blk)
			blocks = append(blocks, blk)
			delta++
		}
		levels[lvl] = blocks
	}
	seed := fs.inodeSeed(n)
	// firsts[k] is the first logical block under node k of the level
	// being written, for the level above.
	var firsts []uint32
	for k, blk := range levels0(levels) {
		lo := k * leafCap
		hi := min(lo+leafCap, len(m.exts))
		firsts = append(firsts, m.exts[lo].Logical)
		if k < firstLeaf {
			continue
		}
		node := &disk.ExtentNode{Max: uint16(leafCap), Leaves: m.exts[lo:hi]}
		if err := fs.writeTreeBlock(blk, node, seed); err != nil {
			return err
		}
	}
	for lvl := 1; lvl < len(levels); lvl++ {
		below := levels[lvl-1]
		var next []uint32
		for k, blk := range levels[lvl] {
			lo := k * leafCap
			hi := min(lo+leafCap, len(below))
			node := &disk.ExtentNode{Depth: uint16(lvl), Max: uint16(leafCap)}
			for c := lo; c < hi; c++ {
				node.Indexes = append(node.Indexes, disk.ExtentIndex{Logical: firsts[c], Child: below[c]})
			}
			next = append(next, firsts[lo])
			if err := fs.writeTreeBlock(blk, node, seed); err != nil {
				return err
			}
		}
		firsts = next
	}
	root := &disk.ExtentNode{Depth: uint16(len(levels)), Max: rootExtentCap}
	if len(levels) == 0 {
		root.Leaves = m.exts
	} else {
		top := levels[len(levels)-1]
		for k, blk := range top {
			root.Indexes = append(root.Indexes, disk.ExtentIndex{Logical: firsts[k], Child: blk})
		}
	}
	var rb [disk.IBlockSize]byte
	disk.MarshalExtentNode(rb[:], root)
	if !bytes.Equal(rb[:], n.raw.IBlock()) {
		copy(n.raw.IBlock(), rb[:])
		fs.markDirty(n)
	}
	if delta != 0 {
		fs.addBlocks(n, delta)
	}
	m.levels, m.depth, m.packed, m.dirtyFrom = levels, len(levels), true, -1
	return nil
}

func levels0(levels [][]uint64) []uint64 {
	if len(levels) == 0 {
		return nil
	}
	return levels[0]
}

// writeTreeBlock writes node into tree block blk if its content changed.
func (fs *FS) writeTreeBlock(blk uint64, node *disk.ExtentNode, seed uint32) error {
	buf := make([]byte, fs.geo.blockSize)
	disk.MarshalExtentNode(buf, node)
	if fs.csum {
		disk.SetExtentBlockChecksum(buf, seed)
	}
	b, err := fs.bread(blk)
	if err != nil {
		return err
	}
	if bytes.Equal(b.data, buf) {
		return nil
	}
	copy(fs.modify(b), buf)
	return nil
}

// emptyExtentRoot initializes i_block with an empty extent tree.
func emptyExtentRoot(raw disk.Inode) {
	disk.MarshalExtentNode(raw.IBlock(), &disk.ExtentNode{Max: rootExtentCap})
}

// treeBlocks counts the blocks of m's tree (or indirect blocks).
func (m *fileMap) treeBlocks() uint64 {
	n := uint64(len(m.indirect))
	for _, l := range m.levels {
		n += uint64(len(l))
	}
	return n
}

// freeTree releases every block of m's tree (index/leaf or indirect
// blocks), leaving the extents alone.
func (fs *FS) freeTree(m *fileMap) error {
	for _, l := range m.levels {
		for _, blk := range l {
			if err := fs.freeBlockRange(blk, 1); err != nil {
				return err
			}
		}
	}
	for _, blk := range m.indirect {
		if err := fs.freeBlockRange(blk, 1); err != nil {
			return err
		}
	}
	m.levels, m.indirect, m.depth = nil, nil, 0
	return nil
}
