package ext4lite

import (
	"fmt"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// gapBuckets classifies directory blocks by their largest free gap in
// 4-byte steps up to the largest entry (8 + 255 rounded up = 264 bytes).
const gapBuckets = (disk.DirEntryHeader+disk.MaxNameLen+3)/4 + 1

// maxDirSize caps linear directories at 2 GiB, as ext4 without largedir.
const maxDirSize = 1 << 31

// dirSlot locates one entry.
type dirSlot struct {
	ino   Ino
	block uint32 // logical directory block
	off   uint32 // offset in the block
	ft    uint8
}

// dirBlockInfo is the free-space summary of one directory block.
type dirBlockInfo struct {
	maxGap int
	bucket int // -1 when not bucketed (htree index blocks)
	pos    int
}

// dirIndex is the in-memory index of a directory: every name, and the
// blocks by free space, so lookups and inserts never scan the directory.
type dirIndex struct {
	names   map[string]dirSlot
	blocks  []dirBlockInfo
	buckets [gapBuckets][]uint32
	// entries and subdirs count entries other than "." and "..".
	entries int
	subdirs int
	// dxNodes are the logical blocks holding htree interior nodes; with
	// the root in block 0 they are stripped before the first change.
	dxNodes []uint32
	// inline lists, in on-disk order, the entries of a directory kept in
	// its inode (inline_data, read-only); nil otherwise.
	inline []Dirent
}

func gapBucket(gap int) int { return min(gap, (gapBuckets-1)*4) / 4 }

func (d *dirIndex) setGap(lblk uint32, gap int) {
	bi := &d.blocks[lblk]
	if bi.bucket >= 0 {
		list := d.buckets[bi.bucket]
		last := list[len(list)-1]
		list[bi.pos] = last
		d.blocks[last].pos = bi.pos
		d.buckets[bi.bucket] = list[:len(list)-1]
	}
	bi.maxGap = gap
	bi.bucket = gapBucket(gap)
	bi.pos = len(d.buckets[bi.bucket])
	d.buckets[bi.bucket] = append(d.buckets[bi.bucket], lblk)
}

// blockWithRoom returns a block with a gap of at least need bytes.
func (d *dirIndex) blockWithRoom(need int) (uint32, bool) {
	for b := (need + 3) / 4; b < gapBuckets; b++ {
		if l := d.buckets[b]; len(l) > 0 {
			return l[len(l)-1], true
		}
	}
	return 0, false
}

// dirIndexOf returns directory n's index, loading it on first use.
func (fs *FS) dirIndexOf(n *inode) (*dirIndex, error) {
	if !n.isDir() {
		return nil, unix.ENOTDIR
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return nil, err
	}
	n.loadMu.Lock()
	defer n.loadMu.Unlock()
	if n.dir != nil {
		return n.dir, nil
	}
	var d *dirIndex
	if n.raw.Flags()&disk.FlagInlineData != 0 {
		d, err = fs.loadInlineDir(n)
	} else {
		d, err = fs.loadDirIndex(n, m)
	}
	if err != nil {
		return nil, fmt.Errorf("directory %d: %w", n.ino, err)
	}
	n.dir = d
	return d, nil
}

func (fs *FS) loadDirIndex(n *inode, m *fileMap) (*dirIndex, error) {
	size := n.raw.Size()
	bs := uint64(fs.geo.blockSize)
	if size%bs != 0 || size == 0 || size > maxDirSize {
		return nil, corruptf("directory size %d", size)
	}
	nblocks := uint32(size / bs)
	d := &dirIndex{names: make(map[string]dirSlot, nblocks*8), blocks: make([]dirBlockInfo, nblocks)}
	for i := range d.blocks {
		d.blocks[i].bucket = -1
	}
	seed := fs.inodeSeed(n)
	isNode := map[uint32]bool{}
	indexed := n.raw.Flags()&disk.FlagIndex != 0
	if indexed {
		b, err := fs.dirBlock(n, m, 0)
		if err != nil {
			return nil, err
		}
		nodes, err := fs.dxNodes(n, m, b.data, nblocks, seed)
		if err != nil {
			return nil, err
		}
		d.dxNodes = nodes
		for _, l := range nodes {
			isNode[l] = true
		}
	}
	for lblk := range nblocks {
		if isNode[lblk] {
			continue
		}
		b, err := fs.dirBlock(n, m, lblk)
		if err != nil {
			return nil, err
		}
		end := fs.geo.blockSize
		if fs.csum && !(indexed && lblk == 0) {
			if fs.verify {
				if err := disk.VerifyDirTail(b.data, seed); err != nil {
					return nil, fmt.Errorf("block %d: %w", lblk, err)
				}
			}
			end -= disk.DirTailSize
		}
		var werr error
		err = disk.WalkDirBlock(b.data, end, fs.geo.inodesCount, func(e disk.DirEntry) bool {
			if e.Inode == 0 {
				return true
			}
			name := string(e.Name)
			if _, dup := d.names[name]; dup {
				werr = corruptf("name %q appears twice", name)
				return false
			}
			d.names[name] = dirSlot{ino: e.Inode, block: lblk, off: uint32(e.Offset), ft: e.FileType}
			if name != "." && name != ".." {
				d.entries++
				if e.FileType == disk.FtDir {
					d.subdirs++
				}
			}
			return true
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", lblk, err)
		}
		if !(indexed && lblk == 0) {
			gap, err := blockGap(b.data, end)
			if err != nil {
				return nil, err
			}
			d.setGap(lblk, gap)
		}
	}
	if s, ok := d.names["."]; !ok || s.ino != n.ino || s.block != 0 || s.off != 0 {
		return nil, corruptf("missing or wrong '.' entry")
	}
	if s, ok := d.names[".."]; !ok || s.block != 0 {
		return nil, corruptf("missing '..' entry")
	}
	return d, nil
}

// dxNodes checks the htree root in block 0 and returns the logical blocks
// of interior index nodes.
func (fs *FS) dxNodes(n *inode, m *fileMap, root []byte, nblocks uint32, seed uint32) ([]uint32, error) {
	dx, err := disk.ParseDxRoot(root)
	if err != nil {
		return nil, err
	}
	if fs.verify {
		if err := disk.VerifyDx(root, dx, seed); err != nil {
			return nil, err
		}
	}
	var nodes []uint32
	level := dx.Children
	for l := 0; l < dx.Levels; l++ {
		var next []uint32
		for _, c := range level {
			if c == 0 || c >= nblocks {
				return nil, corruptf("htree points at block %d of %d", c, nblocks)
			}
			b, err := fs.dirBlock(n, m, c)
			if err != nil {
				return nil, err
			}
			node, err := disk.ParseDxNode(b.data)
			if err != nil {
				return nil, fmt.Errorf("htree node block %d: %w", c, err)
			}
			if fs.verify {
				if err := disk.VerifyDx(b.data, node, seed); err != nil {
					return nil, fmt.Errorf("htree node block %d: %w", c, err)
				}
			}
			nodes = append(nodes, c)
			next = append(next, node.Children...)
		}
		level = next
	}
	for _, c := range level {
		if c >= nblocks {
			return nil, corruptf("htree points at block %d of %d", c, nblocks)
		}
	}
	return nodes, nil
}

// blockGap returns the largest entry that fits into a leaf block.
func blockGap(b []byte, end int) (int, error) {
	best := 0
	err := disk.WalkDirBlock(b, end, ^uint32(0), func(e disk.DirEntry) bool {
		gap := e.RecLen
		if e.Inode != 0 {
			gap -= disk.DirRecLen(len(e.Name))
		}
		best = max(best, gap)
		return true
	})
	return best, err
}

// loadInlineDir reads a directory kept in its inode (inline_data): the
// parent's number in the first 4 bytes of i_block, entries in the rest of
// i_block and in the system.data attribute. "." and ".." are implied.
func (fs *FS) loadInlineDir(n *inode) (*dirIndex, error) {
	ib := n.raw.IBlock()
	parent := le32(ib[0:4])
	d := &dirIndex{names: map[string]dirSlot{
		".":  {ino: n.ino, ft: disk.FtDir},
		"..": {ino: parent, ft: disk.FtDir},
	}}
	d.inline = []Dirent{{Name: ".", Ino: n.ino, Type: DT_DIR}, {Name: "..", Ino: parent, Type: DT_DIR}}
	regions := [][]byte{ib[4:]}
	xs, err := disk.ParseInodeXattrs(n.raw)
	if err != nil {
		return nil, err
	}
	for _, x := range xs {
		if x.Index == disk.InlineDataXattrIndex && x.Name == disk.InlineDataXattrNameStr && len(x.Value) > 0 {
			regions = append(regions, x.Value)
		}
	}
	for _, r := range regions {
		var werr error
		err := disk.WalkDirBlock(r, len(r), fs.geo.inodesCount, func(e disk.DirEntry) bool {
			if e.Inode == 0 {
				return true
			}
			name := string(e.Name)
			if _, dup := d.names[name]; dup {
				werr = corruptf("inline directory %d: name %q appears twice", n.ino, name)
				return false
			}
			ft := e.FileType
			if ft >= disk.FtMax {
				ft = disk.FtUnknown
			}
			d.names[name] = dirSlot{ino: e.Inode, ft: ft}
			d.inline = append(d.inline, Dirent{Name: name, Ino: e.Inode, Type: dtOfFt[ft]})
			d.entries++
			if ft == disk.FtDir {
				d.subdirs++
			}
			return true
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			return nil, fmt.Errorf("inline directory %d: %w", n.ino, err)
		}
	}
	for i := range d.inline {
		d.inline[i].Next = int64(i + 1)
	}
	return d, nil
}
