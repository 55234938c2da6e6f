package ext4lite

import (
	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Directory entry types as in struct dirent's d_type.
const (
	DT_UNKNOWN = 0
	DT_FIFO    = 1
	DT_CHR     = 2
	DT_DIR     = 4
	DT_BLK     = 6
	DT_REG     = 8
	DT_LNK     = 10
	DT_SOCK    = 12
)

var dtOfFt = [disk.FtMax]uint8{
	disk.FtUnknown: DT_UNKNOWN, disk.FtReg: DT_REG, disk.FtDir: DT_DIR, disk.FtChr: DT_CHR,
	disk.FtBlk: DT_BLK, disk.FtFifo: DT_FIFO, disk.FtSock: DT_SOCK, disk.FtSymlink: DT_LNK,
}

// Dirent is one directory entry returned by ReadDir.
type Dirent struct {
	Name string
	Ino  Ino
	Type uint8 // DT_*
	// Next is the offset to resume reading after this entry.
	Next int64
}

// readDirBatch is how many entries ReadDir collects per lock hold.
const readDirBatch = 256

// ReadDir calls fn for the entries of directory dir from offset off (0 for
// the start, else a Next value), including "." and "..", until fn returns
// false. Offsets stay valid across changes to the directory: entries never
// move. fn runs without any lock held, so it may call back into the
// filesystem.
func (fs *FS) ReadDir(dir Ino, off int64, fn func(Dirent) bool) error {
	for {
		batch, err := fs.readDirBatch(dir, off)
		if err != nil {
			return err
		}
		for _, d := range batch {
			if !fn(d) {
				return nil
			}
		}
		if len(batch) < readDirBatch {
			return nil
		}
		off = batch[len(batch)-1].Next
	}
}

// readDirBatch returns up to readDirBatch entries from offset off.
func (fs *FS) readDirBatch(dir Ino, off int64) (batch []Dirent, err error) {
	if err := fs.lockRead(); err != nil {
		return nil, err
	}
	defer fs.unlockRead(&err)
	n, err := fs.getInode(dir)
	if err != nil {
		return nil, err
	}
	d, err := fs.dirIndexOf(n)
	if err != nil {
		return nil, err
	}
	if d.inline != nil {
		// Inline directories count entries, not bytes.
		for i := max(off, 0); i < int64(len(d.inline)) && len(batch) < readDirBatch; i++ {
			batch = append(batch, d.inline[i])
		}
		return batch, nil
	}
	m, err := fs.fileMapOf(n)
	if err != nil {
		return nil, err
	}
	bs := int64(fs.geo.blockSize)
	nodes := make(map[uint32]bool, len(d.dxNodes))
	for _, l := range d.dxNodes {
		nodes[l] = true
	}
	indexed := n.raw.Flags()&disk.FlagIndex != 0
	for lblk := uint32(max(off, 0) / bs); lblk < uint32(len(d.blocks)) && len(batch) < readDirBatch; lblk++ {
		if nodes[lblk] {
			continue
		}
		b, err := fs.dirBlock(n, m, lblk)
		if err != nil {
			return nil, err
		}
		end := fs.geo.blockSize
		if fs.csum && !(indexed && lblk == 0) {
			end -= disk.DirTailSize
		}
		base := int64(lblk) * bs
		err = disk.WalkDirBlock(b.data, end, fs.geo.inodesCount, func(e disk.DirEntry) bool {
			pos := base + int64(e.Offset)
			if e.Inode == 0 || pos < off {
				return true
			}
			ft := e.FileType
			if ft >= disk.FtMax {
				ft = disk.FtUnknown
			}
			next := pos + int64(e.RecLen)
			if e.Offset+e.RecLen >= end {
				next = base + bs
			}
			batch = append(batch, Dirent{Name: string(e.Name), Ino: e.Inode, Type: dtOfFt[ft], Next: next})
			return len(batch) < readDirBatch
		})
		if err != nil {
			return nil, err
		}
	}
	return batch, nil
}
