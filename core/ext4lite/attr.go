package ext4lite

import (
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Timespec is a timestamp with nanoseconds.
type Timespec struct {
	Sec  int64
	Nsec int64
}

func fromStamp(t disk.Timestamp) Timespec { return Timespec{Sec: t.Sec, Nsec: int64(t.Nsec)} }
func (t Timespec) stamp() disk.Timestamp {
	return disk.Timestamp{Sec: t.Sec, Nsec: uint32(t.Nsec)}
}

// Stat describes an inode.
type Stat struct {
	Ino        Ino
	Mode       uint32 // type and permission bits
	Nlink      uint32
	UID, GID   uint32
	Size       uint64
	Blocks     uint64 // 512-byte units
	Rdev       Dev
	Atime      Timespec
	Mtime      Timespec
	Ctime      Timespec
	Btime      Timespec
	Generation uint32
	Flags      uint32 // ext4 inode flags
}

// Stat returns the attributes of inode ino.
func (fs *FS) Stat(ino Ino) (st Stat, err error) {
	if err := fs.lockRead(); err != nil {
		return Stat{}, err
	}
	defer fs.unlockRead(&err)
	n, err := fs.getInode(ino)
	if err != nil {
		return Stat{}, err
	}
	return fs.statOf(n), nil
}

func (fs *FS) statOf(n *inode) Stat {
	r := n.raw
	st := Stat{
		Ino:        n.ino,
		Mode:       uint32(r.Mode()),
		Nlink:      uint32(r.Links()),
		UID:        r.UID(),
		GID:        r.GID(),
		Size:       r.Size(),
		Blocks:     r.Sectors(fs.geo.blockSize),
		Atime:      fromStamp(r.Atime()),
		Mtime:      fromStamp(r.Mtime()),
		Ctime:      fromStamp(r.Ctime()),
		Btime:      fromStamp(r.Crtime()),
		Generation: r.Generation(),
		Flags:      r.Flags(),
	}
	if t := r.FileType(); t == disk.ModeChr || t == disk.ModeBlk {
		st.Rdev.Major, st.Rdev.Minor = r.Rdev()
	}
	return st
}

// SetAttr masks select the attributes SetAttr changes.
const (
	SetMode = 1 << iota
	SetUID
	SetGID
	SetSize
	SetAtime
	SetMtime
	SetCtime
)

// SetAttr holds attributes to change.
type SetAttr struct {
	Mask  uint32
	Mode  uint32 // permission bits only
	UID   uint32
	GID   uint32
	Size  int64
	Atime Timespec
	Mtime Timespec
	// Ctime is used with SetCtime; otherwise any change stamps the
	// current time.
	Ctime Timespec
}

// SetAttr changes attributes of inode ino (chmod, chown, truncate,
// utimes).
func (fs *FS) SetAttr(ino Ino, a SetAttr) error {
	return fs.updateInode(ino, func(n *inode) error { return fs.setAttr(n, a) })
}

// setAttr is SetAttr on n.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) setAttr(n *inode, a SetAttr) error {
	if a.Mask&SetSize != 0 {
		if err := fs.setSize(n, a.Size); err != nil {
			return err
		}
	}
	r := n.raw
	if a.Mask&SetMode != 0 {
		r.SetMode(r.Mode()&disk.ModeFmt | uint16(a.Mode&permMask))
	}
	if a.Mask&SetUID != 0 {
		r.SetUID(a.UID)
	}
	if a.Mask&SetGID != 0 {
		r.SetGID(a.GID)
	}
	if a.Mask&SetAtime != 0 {
		if a.Atime.Nsec < 0 || a.Atime.Nsec >= 1e9 {
			return unix.EINVAL
		}
		r.SetAtime(a.Atime.stamp())
	}
	if a.Mask&SetMtime != 0 {
		if a.Mtime.Nsec < 0 || a.Mtime.Nsec >= 1e9 {
			return unix.EINVAL
		}
		r.SetMtime(a.Mtime.stamp())
	}
	if a.Mask&SetCtime != 0 {
		r.SetCtime(a.Ctime.stamp())
	} else if a.Mask != 0 {
		r.SetCtime(fs.nowStamp())
	}
	fs.markDirty(n)
	return nil
}

// Statfs describes the filesystem's capacity.
type Statfs struct {
	BlockSize   int64
	Blocks      uint64 // data blocks (total minus metadata overhead)
	BlocksFree  uint64
	BlocksAvail uint64 // free minus the root reserve
	Files       uint64
	FilesFree   uint64
	NameLen     uint64
	FSID        [2]uint32
}

// Statfs returns capacity figures like statfs(2) on ext4.
func (fs *FS) Statfs() (sf Statfs, err error) {
	if err := fs.lockRead(); err != nil {
		return Statfs{}, err
	}
	defer fs.unlockRead(&err)
	free := fs.freeBlocks + fs.txn.pendingFreeCount
	reserved := fs.sb.RBlocksCount()
	avail := uint64(0)
	if free > reserved {
		avail = free - reserved
	}
	u := fs.sb.UUID()
	return Statfs{
		BlockSize:   int64(fs.geo.blockSize),
		Blocks:      fs.geo.blocksCount - fs.overhead,
		BlocksFree:  free,
		BlocksAvail: avail,
		Files:       uint64(fs.geo.inodesCount),
		FilesFree:   fs.freeInodes,
		NameLen:     disk.MaxNameLen,
		FSID:        [2]uint32{le32(u[0:]) ^ le32(u[8:]), le32(u[4:]) ^ le32(u[12:])},
	}, nil
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
