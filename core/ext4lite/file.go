package ext4lite

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// writeData writes file data (not journaled) at physical block phys.
func (fs *FS) writeData(phys uint64, p []byte) error {
	fs.txn.dataWritten = true
	return fs.writeBlocks(phys, p)
}

// writeDataAt writes file data at a byte offset into physical block phys.
func (fs *FS) writeDataAt(phys uint64, inBlock int64, p []byte) error {
	fs.txn.dataWritten = true
	if _, err := fs.dev.WriteAt(p, int64(phys)<<fs.geo.blockBits+inBlock); err != nil {
		return fmt.Errorf("ext4lite: write data at block %d: %w", phys, ioError(err))
	}
	return nil
}

// readDataAt reads file data at a byte offset into physical block phys.
func (fs *FS) readDataAt(phys uint64, inBlock int64, p []byte) error {
	if _, err := fs.dev.ReadAt(p, int64(phys)<<fs.geo.blockBits+inBlock); err != nil {
		return fmt.Errorf("ext4lite: read data at block %d: %w", phys, ioError(err))
	}
	if len(fs.overlay) == 0 {
		return nil
	}
	// A read-only open keeps replayed journal blocks in memory.
	bs := int64(fs.geo.blockSize)
	for pos := int64(0); pos < int64(len(p)); {
		blk := phys + uint64((inBlock+pos)/bs)
		in := (inBlock + pos) % bs
		n := min(bs-in, int64(len(p))-pos)
		if data, ok := fs.overlay[blk]; ok {
			copy(p[pos:pos+n], data[in:])
		}
		pos += n
	}
	return nil
}

// maxFileSize is the largest size of an extent-mapped file.
func (fs *FS) maxFileSize() int64 {
	return int64(fs.geo.maxFileBlocks()) << fs.geo.blockBits
}

// ReadAt reads file data like io.ReaderAt: n < len(p) only at the end of
// the file, with io.EOF.
func (fs *FS) ReadAt(ino Ino, p []byte, off int64) (count int, err error) {
	if off < 0 {
		return 0, unix.EINVAL
	}
	if err := fs.lockRead(); err != nil {
		return 0, err
	}
	defer fs.unlockRead(&err)
	n, err := fs.getInode(ino)
	if err != nil {
		return 0, err
	}
	if n.isDir() {
		return 0, unix.EISDIR
	}
	size := int64(n.raw.Size())
	if off >= size {
		return 0, io.EOF
	}
	want := int(min(int64(len(p)), size-off))
	if n.raw.Flags()&disk.FlagInlineData != 0 {
		data, err := fs.inlineData(n)
		if err != nil {
			return 0, err
		}
		copy(p[:want], data[off:])
	} else if err := fs.readMapped(n, p[:want], off); err != nil {
		return 0, err
	}
	if want < len(p) {
		return want, io.EOF
	}
	return want, nil
}

// readMapped reads len(p) bytes at off through n's block map; holes and
// unwritten extents read as zeros.
func (fs *FS) readMapped(n *inode, p []byte, off int64) error {
	m, err := fs.fileMapOf(n)
	if err != nil {
		return err
	}
	bs := int64(fs.geo.blockSize)
	for done := int64(0); done < int64(len(p)); {
		pos := off + done
		lblk := uint64(pos / bs)
		in := pos % bs
		left := int64(len(p)) - done
		mp := m.lookup(lblk, uint64((in+left+bs-1)/bs))
		chunk := min(int64(mp.n)*bs-in, left)
		dst := p[done : done+chunk]
		if mp.physical == 0 || mp.uninit {
			clear(dst)
		} else if err := fs.readDataAt(mp.physical, in, dst); err != nil {
			return err
		}
		done += chunk
	}
	return nil
}

// WriteAt writes file data. Writing past the end extends the file. When
// the filesystem fills up, what fits is written and the short count comes
// with ENOSPC.
func (fs *FS) WriteAt(ino Ino, p []byte, off int64) (written int, err error) {
	if off < 0 {
		return 0, unix.EINVAL
	}
	if err := fs.lockWrite(); err != nil {
		return 0, err
	}
	defer fs.unlockWrite(&err)
	n, err := fs.getInode(ino)
	if err != nil {
		return 0, err
	}
	if err := fs.checkWritableFile(n); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= fs.maxFileSize() {
		return 0, unix.EFBIG
	}
	if int64(len(p)) > fs.maxFileSize()-off {
		p = p[:fs.maxFileSize()-off]
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return 0, err
	}
	want := len(p)
	p, err = fs.fitWrite(m, p, off)
	if err != nil {
		return 0, err
	}
	if err := fs.convertToExtents(n, m); err != nil {
		return 0, err
	}
	size := int64(n.raw.Size())
	if off > size {
		if err := fs.zeroTail(n, m, size, off); err != nil {
			return 0, err
		}
	}
	if err := fs.writeRange(n, m, p, off); err != nil {
		return 0, err
	}
	if err := fs.writeFileMap(n, m); err != nil {
		return 0, err
	}
	if end := off + int64(len(p)); end > size {
		n.raw.SetSize(uint64(end))
	}
	now := fs.nowStamp()
	n.raw.SetMtime(now)
	n.raw.SetCtime(now)
	fs.markDirty(n)
	if len(p) < want {
		// io.WriterAt: a short count comes with an error.
		return len(p), unix.ENOSPC
	}
	return len(p), nil
}

func (fs *FS) checkWritableFile(n *inode) error {
	switch {
	case n.isDir():
		return unix.EISDIR
	case !n.raw.IsReg():
		return unix.EINVAL
	case n.raw.Flags()&(disk.FlagImmutable|disk.FlagAppend) != 0:
		return unix.EPERM
	case n.raw.Flags()&(disk.FlagInlineData|disk.FlagEncrypt|disk.FlagVerity) != 0:
		return fmt.Errorf("inode %d uses a feature ext4lite cannot write: %w", n.ino, unix.EOPNOTSUPP)
	}
	return nil
}

// treeSlack is a bound on extent tree blocks one change can add.
func treeSlack(newBlocks uint64) uint64 { return 2*disk.MaxExtentDepth + 2 + newBlocks/256 }

// fitWrite trims a write to what free space allows, committing first if
// freed blocks are pending. It fails with ENOSPC if nothing fits.
func (fs *FS) fitWrite(m *fileMap, p []byte, off int64) ([]byte, error) {
	bs := int64(fs.geo.blockSize)
	first := uint64(off / bs)
	last := uint64((off + int64(len(p)) - 1) / bs)
	holes := m.holes(first, last+1)
	need := holes + treeSlack(holes) + m.treeBlocks()
	avail, err := fs.availableBlocks(need)
	if err != nil {
		return nil, err
	}
	if avail >= need {
		return p, nil
	}
	slack := treeSlack(holes) + m.treeBlocks()
	if avail <= slack {
		return nil, unix.ENOSPC
	}
	// Keep the prefix whose holes fit.
	budget := avail - slack
	end := m.prefixWithHoles(first, last+1, budget)
	if end <= first {
		return nil, unix.ENOSPC
	}
	keep := int64(end)*bs - off
	return p[:min(int64(len(p)), keep)], nil
}

// holes counts unmapped blocks in [start, end).
func (m *fileMap) holes(start, end uint64) uint64 {
	var n uint64
	for pos := start; pos < end; {
		mp := m.lookup(pos, end-pos)
		if mp.physical == 0 {
			n += mp.n
		}
		pos += mp.n
	}
	return n
}

// prefixWithHoles returns the end of the longest prefix of [start, end)
// with at most budget unmapped blocks.
func (m *fileMap) prefixWithHoles(start, end, budget uint64) uint64 {
	for pos := start; pos < end; {
		mp := m.lookup(pos, end-pos)
		if mp.physical == 0 {
			if mp.n > budget {
				return pos + budget
			}
			budget -= mp.n
		}
		pos += mp.n
	}
	return end
}

// writeRange writes p at off, allocating holes and converting unwritten
// extents as it goes.
//
// Preconditions: fs.mu is held exclusively; the blocks for the holes were
// reserved.
func (fs *FS) writeRange(n *inode, m *fileMap, p []byte, off int64) error {
	bs := int64(fs.geo.blockSize)
	var allocated int64
	defer func() {
		if allocated > 0 {
			fs.addBlocks(n, allocated)
		}
	}()
	for done := int64(0); done < int64(len(p)); {
		pos := off + done
		lblk := uint64(pos / bs)
		in := pos % bs
		left := int64(len(p)) - done
		nblocks := uint64((in + left + bs - 1) / bs)
		mp := m.lookup(lblk, nblocks)
		switch {
		case mp.physical == 0:
			goal := m.goalFor(lblk)
			if goal == 0 {
				goal = fs.inodeGoal(n.ino)
			}
			start, got, err := fs.allocBlocks(goal, mp.n)
			if err != nil {
				return err
			}
			allocated += int64(got)
			chunk := min(int64(got)*bs-in, left)
			if err := fs.writeFresh(start, in, p[done:done+chunk]); err != nil {
				return err
			}
			m.insert(disk.Extent{Logical: uint32(lblk), Len: uint32(got), Physical: start})
			done += chunk
		case mp.uninit:
			chunk := min(int64(mp.n)*bs-in, left)
			if err := fs.writeFresh(mp.physical, in, p[done:done+chunk]); err != nil {
				return err
			}
			k := uint64((in + chunk + bs - 1) / bs)
			m.setInit(lblk, lblk+k)
			done += chunk
		default:
			chunk := min(int64(mp.n)*bs-in, left)
			if err := fs.writeDataAt(mp.physical, in, p[done:done+chunk]); err != nil {
				return err
			}
			done += chunk
		}
	}
	return nil
}

// writeFresh writes data into blocks that hold nothing yet (new or
// unwritten), starting in bytes into the first one; the rest of the first
// and last blocks is zeroed.
func (fs *FS) writeFresh(phys uint64, in int64, data []byte) error {
	bs := int64(fs.geo.blockSize)
	if in != 0 || int64(len(data)) < bs {
		k := min(bs-in, int64(len(data)))
		buf := make([]byte, bs)
		copy(buf[in:], data[:k])
		if err := fs.writeData(phys, buf); err != nil {
			return err
		}
		phys++
		data = data[k:]
	}
	whole := int64(len(data)) / bs * bs
	if whole > 0 {
		if err := fs.writeData(phys, data[:whole]); err != nil {
			return err
		}
		phys += uint64(whole / bs)
		data = data[whole:]
	}
	if len(data) > 0 {
		buf := make([]byte, bs)
		copy(buf, data)
		return fs.writeData(phys, buf)
	}
	return nil
}
