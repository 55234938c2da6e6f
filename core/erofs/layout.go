package erofs

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/fstree"
)

// inodeInfo is one inode of the image being laid out.
type inodeInfo struct {
	node   *fstree.Node
	path   string // first path it was found at, for error messages
	parent *inodeInfo
	nlink  uint32
	ino    uint32

	// Layout, filled by planLayout.
	nid        uint64
	dataLayout uint16
	size       uint64
	u          uint32 // raw block address or device number
	inline     uint32 // bytes of tail data stored right after the inode
	dir        []dirBlock
}

// dirBlock is one block of a directory: entries [first, first+count) of the
// directory's sorted entry list.
type dirBlock struct {
	first, count int
	used         int // bytes of dirents and names
}

// dirEntry is a directory entry, including "." and "..".
type dirEntry struct {
	name  string
	inode *inodeInfo
}

// collect walks the tree depth first in byte order and returns its inodes,
// each once, with link counts. It validates what EROFS cannot represent.
func collect(root *fstree.Node, nextents int) ([]*inodeInfo, error) {
	var inodes []*inodeInfo
	seen := make(map[*fstree.Node]*inodeInfo)
	var visit func(path string, n *fstree.Node, parent *inodeInfo) (*inodeInfo, error)
	visit = func(path string, n *fstree.Node, parent *inodeInfo) (*inodeInfo, error) {
		if in, ok := seen[n]; ok {
			if n.IsDir() {
				return nil, fmt.Errorf("erofs: directory %q is also linked at %q; directories cannot be hard links", in.path, path)
			}
			in.nlink++
			return in, nil
		}
		if err := validate(path, n, nextents); err != nil {
			return nil, err
		}
		in := &inodeInfo{node: n, path: path, parent: parent, nlink: 1, ino: uint32(len(inodes) + 1)}
		if parent == nil {
			in.parent = in
		}
		seen[n] = in
		inodes = append(inodes, in)
		if !n.IsDir() {
			return in, nil
		}
		in.nlink = 2
		for _, name := range n.SortedNames() {
			child := n.Children[name]
			if _, err := visit(path+"/"+name, child, in); err != nil {
				return nil, err
			}
			if child.IsDir() {
				in.nlink++
			}
		}
		return in, nil
	}
	if _, err := visit("", root, nil); err != nil {
		return nil, err
	}
	return inodes, nil
}

func validate(path string, n *fstree.Node, nextents int) error {
	where := path
	if where == "" {
		where = "/"
	}
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		name := path[i+1:]
		switch {
		case name == "" || name == "." || name == "..":
			return fmt.Errorf("erofs: %q: invalid file name %q", where, name)
		case len(name) > maxNameLen:
			return fmt.Errorf("erofs: %q: file name is %d bytes long; the limit is %d", where, len(name), maxNameLen)
		case strings.IndexByte(name, 0) >= 0:
			return fmt.Errorf("erofs: %q: file name contains a NUL byte", where)
		}
	}
	switch n.Type() {
	case fstree.TypeRegular:
		if n.Data >= uint64(nextents) {
			return fmt.Errorf("erofs: %q: data handle %d was not returned by AddFile", where, n.Data)
		}
	case fstree.TypeSymlink:
		if n.Target == "" || len(n.Target) >= BlockSize {
			return fmt.Errorf("erofs: %q: symlink target length %d is outside 1..%d", where, len(n.Target), BlockSize-1)
		}
	case fstree.TypeChar, fstree.TypeBlock:
		major, minor := unix.Major(n.Rdev), unix.Minor(n.Rdev)
		if major > 0xfff || minor > 0xfffff {
			return fmt.Errorf("erofs: %q: device %d:%d does not fit EROFS's 12-bit major and 20-bit minor", where, major, minor)
		}
	case fstree.TypeDir, fstree.TypeFIFO, fstree.TypeSocket:
	default:
		return fmt.Errorf("erofs: %q: unsupported file type %#o", where, n.Type())
	}
	return nil
}

// entries returns a directory's entries in the byte order EROFS requires,
// "." and ".." included.
func (in *inodeInfo) entries(byNode map[*fstree.Node]*inodeInfo) []dirEntry {
	names := in.node.SortedNames()
	out := make([]dirEntry, 0, len(names)+2)
	dots := []dirEntry{{".", in}, {"..", in.parent}}
	for _, name := range names {
		// "." and ".." sort among the names ('-' and '+' come before '.').
		for len(dots) > 0 && dots[0].name < name {
			out = append(out, dots[0])
			dots = dots[1:]
		}
		out = append(out, dirEntry{name, byNode[in.node.Children[name]]})
	}
	return append(out, dots...)
}

// packDir splits sorted entries into directory blocks, filling each block as
// far as it goes; an entry never straddles blocks.
func packDir(entries []dirEntry) []dirBlock {
	var blocks []dirBlock
	cur := dirBlock{}
	for i, e := range entries {
		need := direntSize + len(e.name)
		if cur.used+need > BlockSize {
			blocks = append(blocks, cur)
			cur = dirBlock{first: i}
		}
		cur.count++
		cur.used += need
	}
	return append(blocks, cur)
}

// layout is the placement of every inode and directory block.
type layout struct {
	inodes  []*inodeInfo
	byNode  map[*fstree.Node]*inodeInfo
	extents []uint32 // start block of each data handle
	// Full directory and long-symlink blocks start at auxStart; the
	// metadata region (all inodes but the root) starts at metaStart.
	auxStart, metaStart uint32
	metaEnd             uint64 // byte offset of the end of the metadata
	blocks              uint32
}

func planLayout(inodes []*inodeInfo, extents []uint32, dataEnd uint32) (*layout, error) {
	l := &layout{inodes: inodes, extents: extents, auxStart: dataEnd, byNode: make(map[*fstree.Node]*inodeInfo, len(inodes))}
	for _, in := range inodes {
		l.byNode[in.node] = in
	}
	next := dataEnd // next free auxiliary block
	// tailRoom is how much inline tail an inode may carry; the root lives
	// in block 0 right after the superblock.
	for i, in := range inodes {
		tailRoom := uint64(BlockSize - inodeSize)
		if i == 0 {
			tailRoom = BlockSize - rootNid*slotSize - inodeSize
		}
		n := in.node
		switch n.Type() {
		case fstree.TypeRegular:
			in.size = uint64(n.Size)
			if n.Size > 0 {
				in.u = extents[n.Data]
			}
		case fstree.TypeChar, fstree.TypeBlock:
			in.u = encodeDev(unix.Major(n.Rdev), unix.Minor(n.Rdev))
		case fstree.TypeSymlink:
			in.size = uint64(len(n.Target))
			if in.size <= tailRoom {
				in.dataLayout, in.inline = dataFlatInline, uint32(in.size)
			} else {
				in.u = next
				next++
			}
		case fstree.TypeDir:
			in.dir = packDir(in.entries(l.byNode))
			last := in.dir[len(in.dir)-1]
			full := uint32(len(in.dir) - 1)
			in.size = uint64(full)*BlockSize + uint64(last.used)
			tail := in.size % BlockSize
			if tail != 0 && tail <= tailRoom {
				in.dataLayout, in.inline = dataFlatInline, uint32(tail)
			} else {
				full = uint32(len(in.dir))
			}
			if full > 0 {
				in.u = next
				next += full
			}
		}
		if uint64(next) >= maxBlocks {
			return nil, fmt.Errorf("erofs: image would exceed %d blocks (16 TiB)", uint64(maxBlocks))
		}
	}
	l.metaStart = next
	// Place inodes: the root in block 0, the others packed from metaStart,
	// slot-aligned, each inode together with its inline tail inside one
	// block (Linux and gVisor refuse tails that cross a block boundary).
	inodes[0].nid = rootNid
	off := uint64(l.metaStart) * BlockSize
	for _, in := range inodes[1:] {
		rec := uint64(inodeSize) + uint64(in.inline)
		if off%BlockSize+rec > BlockSize {
			off = (off + BlockSize - 1) / BlockSize * BlockSize
		}
		in.nid = off / slotSize
		off += (rec + slotSize - 1) / slotSize * slotSize
	}
	l.metaEnd = off
	blocks := (off + BlockSize - 1) / BlockSize
	if blocks >= maxBlocks {
		return nil, fmt.Errorf("erofs: image would exceed %d blocks (16 TiB)", uint64(maxBlocks))
	}
	l.blocks = uint32(blocks)
	return l, nil
}

func (in *inodeInfo) record(b []byte) []byte {
	(&inode{
		dataLayout: in.dataLayout,
		mode:       uint16(in.node.Mode),
		size:       in.size,
		u:          in.u,
		ino:        in.ino,
		uid:        in.node.UID,
		gid:        in.node.GID,
		mtime:      clampTime(in.node.Mtime.Sec),
		mtimeNsec:  in.node.Mtime.Nsec,
		nlink:      in.nlink,
	}).put(b)
	return b[:inodeSize]
}

// dirBlockBytes renders directory block k of in into b (BlockSize long,
// zeroed first) and returns the used length.
func (l *layout) dirBlockBytes(in *inodeInfo, entries []dirEntry, k int, b []byte) int {
	clear(b)
	blk := in.dir[k]
	nameOff := direntSize * blk.count
	for j := 0; j < blk.count; j++ {
		e := entries[blk.first+j]
		putDirent(b[j*direntSize:], e.inode.nid, uint16(nameOff), fileType(e.inode.node.Mode))
		nameOff += copy(b[nameOff:], e.name)
	}
	return blk.used
}

func fileType(mode uint32) uint8 {
	switch mode & fstree.TypeMask {
	case fstree.TypeRegular:
		return ftRegular
	case fstree.TypeDir:
		return ftDir
	case fstree.TypeChar:
		return ftChar
	case fstree.TypeBlock:
		return ftBlock
	case fstree.TypeFIFO:
		return ftFIFO
	case fstree.TypeSocket:
		return ftSocket
	case fstree.TypeSymlink:
		return ftSymlink
	}
	return ftUnknown
}

// write writes the directory blocks, the metadata and block 0 (superblock
// and root inode), and sizes the file to a whole number of blocks.
func (l *layout) write(f *os.File, sb *superBlock) error {
	block := make([]byte, BlockSize)
	// meta buffers the metadata region, flushed in large writes.
	meta := newRegionWriter(f, int64(l.metaStart)*BlockSize)
	block0 := make([]byte, BlockSize)
	for i, in := range l.inodes {
		var tail []byte
		switch in.node.Type() {
		case fstree.TypeSymlink:
			if in.inline > 0 {
				tail = []byte(in.node.Target)
			} else {
				copy(block, in.node.Target)
				clear(block[len(in.node.Target):])
				if _, err := f.WriteAt(block, int64(in.u)*BlockSize); err != nil {
					return err
				}
			}
		case fstree.TypeDir:
			entries := in.entries(l.byNode)
			full := len(in.dir)
			if in.inline > 0 {
				full--
			}
			for k := range in.dir {
				used := l.dirBlockBytes(in, entries, k, block)
				if k < full {
					if _, err := f.WriteAt(block, int64(in.u+uint32(k))*BlockSize); err != nil {
						return err
					}
				} else {
					tail = append([]byte(nil), block[:used]...)
				}
			}
		}
		if i == 0 {
			off := rootNid * slotSize
			copy(block0[off:], in.record(make([]byte, inodeSize)))
			copy(block0[off+inodeSize:], tail)
			continue
		}
		if err := meta.put(int64(in.nid)*slotSize, in.record(block[:inodeSize]), tail); err != nil {
			return err
		}
	}
	if err := meta.flush(); err != nil {
		return err
	}
	if err := f.Truncate(int64(l.blocks) * BlockSize); err != nil {
		return err
	}
	sb.blocks = l.blocks
	sb.put(block0)
	_, err := f.WriteAt(block0, 0)
	return err
}

// regionWriter accumulates a contiguous region of the file written in
// increasing offsets and flushes it in large writes.
type regionWriter struct {
	f     *os.File
	start int64 // file offset of buf[0]
	buf   []byte
}

func newRegionWriter(f *os.File, start int64) *regionWriter {
	return &regionWriter{f: f, start: start, buf: make([]byte, 0, copyBufferSize)}
}

// put places the concatenation of parts at file offset off, which must not
// be below the end of what was put before. The gap is zero filled.
func (r *regionWriter) put(off int64, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if len(r.buf) > 0 && off-r.start+int64(n) > int64(cap(r.buf)) {
		if err := r.flush(); err != nil {
			return err
		}
	}
	if len(r.buf) == 0 {
		r.start = off
	}
	for pad := off - r.start - int64(len(r.buf)); pad > 0; {
		k := min(pad, BlockSize)
		r.buf = append(r.buf, zeroBlock[:k]...)
		pad -= k
	}
	for _, p := range parts {
		r.buf = append(r.buf, p...)
	}
	return nil
}

func (r *regionWriter) flush() error {
	if len(r.buf) == 0 {
		return nil
	}
	_, err := r.f.WriteAt(r.buf, r.start)
	r.start += int64(len(r.buf))
	r.buf = r.buf[:0]
	return err
}
