package ext4lite

import (
	"strings"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Mode bits as in Linux.
const (
	S_IFMT   = 0o170000
	S_IFSOCK = 0o140000
	S_IFLNK  = 0o120000
	S_IFREG  = 0o100000
	S_IFBLK  = 0o060000
	S_IFDIR  = 0o040000
	S_IFCHR  = 0o020000
	S_IFIFO  = 0o010000
	permMask = 0o7777
)

// Rename flags as in Linux renameat2.
const (
	RenameNoReplace = 1
	RenameExchange  = 2
	RenameWhiteout  = 4
)

// Dev is a device number.
type Dev struct{ Major, Minor uint32 }

// Owner is who owns a new inode. Callers apply setgid-directory
// inheritance and umask before calling.
type Owner struct{ UID, GID uint32 }

// inheritedFlags are the inode flags a new inode takes from its directory.
const inheritedFlags = disk.FlagSync | disk.FlagNodump | disk.FlagNoatime | disk.FlagDirsync | disk.FlagProjinherit

func checkName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return unix.EINVAL
	case len(name) > disk.MaxNameLen:
		return unix.ENAMETOOLONG
	case strings.ContainsAny(name, "/\x00"):
		return unix.EINVAL
	}
	return nil
}

// Lookup returns the inode name refers to in directory dir.
func (fs *FS) Lookup(dir Ino, name string) (ino Ino, err error) {
	if err := fs.lockRead(); err != nil {
		return 0, err
	}
	defer fs.unlockRead(&err)
	n, err := fs.getInode(dir)
	if err != nil {
		return 0, err
	}
	d, err := fs.dirIndexOf(n)
	if err != nil {
		return 0, err
	}
	slot, ok := d.names[name]
	if !ok {
		return 0, unix.ENOENT
	}
	return slot.ino, nil
}

// parentDir loads directory dir for a change of entry name.
func (fs *FS) parentDir(dir Ino) (*inode, *dirIndex, error) {
	n, err := fs.getInode(dir)
	if err != nil {
		return nil, nil, err
	}
	d, err := fs.dirIndexOf(n)
	if err != nil {
		return nil, nil, err
	}
	if n.raw.Links() == 0 {
		return nil, nil, unix.ENOENT // removed while open
	}
	return n, d, nil
}

// Create makes a regular file. mode's permission bits are used as given.
func (fs *FS) Create(dir Ino, name string, mode uint32, owner Owner) (Ino, error) {
	return fs.Mknod(dir, name, S_IFREG|mode&permMask, Dev{}, owner)
}

// Mknod makes a regular file, device, FIFO or socket (mode carries the
// type). A character device 0:0 is an overlayfs whiteout.
func (fs *FS) Mknod(dir Ino, name string, mode uint32, rdev Dev, owner Owner) (Ino, error) {
	switch mode & S_IFMT {
	case 0:
		mode |= S_IFREG
	case S_IFREG, S_IFCHR, S_IFBLK, S_IFIFO, S_IFSOCK:
	default:
		return 0, unix.EINVAL
	}
	return fs.create(dir, name, uint16(mode), owner, 0, func(n *inode) error {
		if t := mode & S_IFMT; t == S_IFCHR || t == S_IFBLK {
			n.raw.SetRdev(rdev.Major, rdev.Minor)
		}
		return nil
	})
}

// Mkdir makes a directory.
func (fs *FS) Mkdir(dir Ino, name string, mode uint32, owner Owner) (Ino, error) {
	return fs.create(dir, name, uint16(S_IFDIR|mode&permMask), owner, 1, func(n *inode) error {
		phys, err := fs.allocBlock(fs.inodeGoal(n.ino))
		if err != nil {
			return err
		}
		b := fs.bnew(phys)
		fs.initDirBlock(b.data, n.ino, dir, fs.inodeSeed(n))
		m := &fileMap{dirtyFrom: 0}
		m.insert(disk.Extent{Logical: 0, Len: 1, Physical: phys})
		n.fmap = m
		if err := fs.writeFileMap(n, m); err != nil {
			return err
		}
		fs.addBlocks(n, 1)
		n.raw.SetSize(uint64(fs.geo.blockSize))
		d := &dirIndex{names: map[string]dirSlot{
			".":  {ino: n.ino, block: 0, off: 0, ft: disk.FtDir},
			"..": {ino: dir, block: 0, off: uint32(disk.DirRecLen(1)), ft: disk.FtDir},
		}, blocks: []dirBlockInfo{{bucket: -1}}}
		gap, err := blockGap(b.data, fs.dirEnd())
		if err != nil {
			return err
		}
		d.setGap(0, gap)
		n.dir = d
		return nil
	})
}

// Symlink makes a symbolic link to target: inside the inode below 60
// bytes, in a block otherwise.
func (fs *FS) Symlink(dir Ino, name, target string, owner Owner) (Ino, error) {
	if len(target) == 0 {
		return 0, unix.ENOENT
	}
	if len(target) >= fs.geo.blockSize {
		return 0, unix.ENAMETOOLONG
	}
	fast := len(target) < disk.IBlockSize
	extra := uint64(1)
	if fast {
		extra = 0
	}
	return fs.create(dir, name, S_IFLNK|0o777, owner, extra, func(n *inode) error {
		n.raw.SetSize(uint64(len(target)))
		if fast {
			clear(n.raw.IBlock())
			copy(n.raw.IBlock(), target)
			n.raw.SetFlags(n.raw.Flags() &^ disk.FlagExtents)
			return nil
		}
		phys, err := fs.allocBlock(fs.inodeGoal(n.ino))
		if err != nil {
			return err
		}
		buf := make([]byte, fs.geo.blockSize)
		copy(buf, target)
		if err := fs.writeData(phys, buf); err != nil {
			return err
		}
		m := &fileMap{dirtyFrom: 0}
		m.insert(disk.Extent{Logical: 0, Len: 1, Physical: phys})
		n.fmap = m
		if err := fs.writeFileMap(n, m); err != nil {
			return err
		}
		fs.addBlocks(n, 1)
		return nil
	})
}

// create is the common part of making an inode and linking it into dir.
func (fs *FS) create(dir Ino, name string, mode uint16, owner Owner, extraBlocks uint64, init func(n *inode) error) (ino Ino, err error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if err := fs.lockWrite(); err != nil {
		return 0, err
	}
	defer fs.unlockWrite(&err)
	p, d, err := fs.parentDir(dir)
	if err != nil {
		return 0, err
	}
	if _, ok := d.names[name]; ok {
		return 0, unix.EEXIST
	}
	isDir := mode&disk.ModeFmt == disk.ModeDir
	if isDir && d.subdirs+2 >= disk.LinkMax && !fs.dirNlink {
		return 0, unix.EMLINK
	}
	if err := fs.reserveBlocks(fs.dirAddReserve(p) + extraBlocks + 1); err != nil {
		return 0, err
	}
	if fs.freeInodes == 0 {
		return 0, unix.ENOSPC
	}
	n, err := fs.newInode(p, mode, owner)
	if err != nil {
		return 0, err
	}
	if err := init(n); err != nil {
		return 0, err
	}
	if err := fs.dirAdd(p, d, name, n.ino, disk.FileTypeOfMode(mode)); err != nil {
		return 0, err
	}
	now := fs.nowStamp()
	p.raw.SetMtime(now)
	p.raw.SetCtime(now)
	if isDir {
		fs.syncDirLinks(p, d)
	}
	fs.markDirty(p)
	return n.ino, nil
}

// newInode allocates and initializes an inode of the given mode.
//
// Preconditions: fs.mu is held exclusively; an inode is free.
func (fs *FS) newInode(parent *inode, mode uint16, owner Owner) (*inode, error) {
	isDir := mode&disk.ModeFmt == disk.ModeDir
	ino, err := fs.allocInode(parent.ino, isDir)
	if err != nil {
		return nil, err
	}
	raw := disk.Inode(make([]byte, fs.geo.inodeSize))
	if fs.geo.inodeSize > disk.GoodOldInodeSize {
		raw.SetExtraIsize(max(fs.sb.WantExtraIsize(), fs.sb.MinExtraIsize(), 32))
		if int(raw.ExtraIsize())+disk.GoodOldInodeSize > fs.geo.inodeSize {
			raw.SetExtraIsize(uint16(fs.geo.inodeSize - disk.GoodOldInodeSize))
		}
	}
	raw.SetMode(mode)
	raw.SetUID(owner.UID)
	raw.SetGID(owner.GID)
	now := fs.nowStamp()
	raw.SetAtime(now)
	raw.SetCtime(now)
	raw.SetMtime(now)
	raw.SetCrtime(now)
	raw.SetLinks(1)
	if isDir {
		raw.SetLinks(2)
	}
	fs.generation++
	raw.SetGeneration(fs.generation)
	flags := parent.raw.Flags() & inheritedFlags
	if !isDir {
		flags &^= disk.FlagDirsync
	}
	switch mode & disk.ModeFmt {
	case disk.ModeReg, disk.ModeDir, disk.ModeLnk:
		flags |= disk.FlagExtents
		raw.SetFlags(flags)
		emptyExtentRoot(raw)
	default:
		raw.SetFlags(flags)
	}
	n := &inode{ino: ino, raw: raw}
	n.fmap = &fileMap{dirtyFrom: -1, packed: true}
	fs.cacheNewInode(n)
	return n, nil
}

// CreateTmpfile makes an unnamed regular file for O_TMPFILE: it holds one
// reference (DecRef releases the file) and waits on the orphan list until
// Link gives it a name.
func (fs *FS) CreateTmpfile(dir Ino, mode uint32, owner Owner) (ino Ino, err error) {
	if err := fs.lockWrite(); err != nil {
		return 0, err
	}
	defer fs.unlockWrite(&err)
	p, _, err := fs.parentDir(dir)
	if err != nil {
		return 0, err
	}
	if fs.freeInodes == 0 {
		return 0, unix.ENOSPC
	}
	n, err := fs.newInode(p, uint16(S_IFREG|mode&permMask), owner)
	if err != nil {
		return 0, err
	}
	n.raw.SetLinks(0)
	n.refs = 1
	n.linkable = true
	fs.addOrphan(n)
	return n.ino, nil
}

// Link makes name in dir another link to inode target.
func (fs *FS) Link(dir Ino, name string, target Ino) (err error) {
	if err := checkName(name); err != nil {
		return err
	}
	if err := fs.lockWrite(); err != nil {
		return err
	}
	defer fs.unlockWrite(&err)
	p, d, err := fs.parentDir(dir)
	if err != nil {
		return err
	}
	n, err := fs.getInode(target)
	if err != nil {
		return err
	}
	switch {
	case n.isDir():
		return unix.EPERM
	case n.raw.Links() == 0 && !n.linkable:
		return unix.ENOENT
	case n.raw.Links() >= disk.LinkMax:
		return unix.EMLINK
	}
	if _, ok := d.names[name]; ok {
		return unix.EEXIST
	}
	if err := fs.reserveBlocks(fs.dirAddReserve(p)); err != nil {
		return err
	}
	if err := fs.dirAdd(p, d, name, n.ino, disk.FileTypeOfMode(n.raw.Mode())); err != nil {
		return err
	}
	if n.raw.Links() == 0 {
		// A temporary file gets its first name.
		if err := fs.removeOrphan(n); err != nil {
			return err
		}
		n.linkable = false
	}
	now := fs.nowStamp()
	n.raw.SetLinks(n.raw.Links() + 1)
	n.raw.SetCtime(now)
	fs.markDirty(n)
	p.raw.SetMtime(now)
	p.raw.SetCtime(now)
	fs.markDirty(p)
	return nil
}

// Unlink removes name, which must not be a directory, from dir.
func (fs *FS) Unlink(dir Ino, name string) (err error) {
	if name == "." || name == ".." {
		return unix.EISDIR
	}
	if err := fs.lockWrite(); err != nil {
		return err
	}
	defer fs.unlockWrite(&err)
	p, d, err := fs.parentDir(dir)
	if err != nil {
		return err
	}
	slot, ok := d.names[name]
	if !ok {
		return unix.ENOENT
	}
	n, err := fs.getInode(slot.ino)
	if err != nil {
		return err
	}
	if n.isDir() {
		return unix.EISDIR
	}
	if err := fs.dirRemove(p, d, name); err != nil {
		return err
	}
	now := fs.nowStamp()
	p.raw.SetMtime(now)
	p.raw.SetCtime(now)
	fs.markDirty(p)
	n.raw.SetCtime(now)
	return fs.dropLink(n)
}

// Rmdir removes the empty directory name from dir.
func (fs *FS) Rmdir(dir Ino, name string) (err error) {
	switch name {
	case ".":
		return unix.EINVAL
	case "..":
		return unix.ENOTEMPTY
	}
	if err := fs.lockWrite(); err != nil {
		return err
	}
	defer fs.unlockWrite(&err)
	p, d, err := fs.parentDir(dir)
	if err != nil {
		return err
	}
	slot, ok := d.names[name]
	if !ok {
		return unix.ENOENT
	}
	n, err := fs.getInode(slot.ino)
	if err != nil {
		return err
	}
	if !n.isDir() {
		return unix.ENOTDIR
	}
	nd, err := fs.dirIndexOf(n)
	if err != nil {
		return err
	}
	if nd.entries > 0 {
		return unix.ENOTEMPTY
	}
	if err := fs.dirRemove(p, d, name); err != nil {
		return err
	}
	now := fs.nowStamp()
	p.raw.SetMtime(now)
	p.raw.SetCtime(now)
	fs.syncDirLinks(p, d)
	fs.markDirty(p)
	n.raw.SetCtime(now)
	n.raw.SetLinks(1)
	return fs.dropLink(n)
}

// dropLink removes one link from n, releasing it when none is left and no
// reference holds it open (then it waits on the orphan list).
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) dropLink(n *inode) error {
	if n.raw.Links() > 0 {
		n.raw.SetLinks(n.raw.Links() - 1)
	}
	fs.markDirty(n)
	if n.raw.Links() > 0 {
		return nil
	}
	if n.refs > 0 {
		fs.addOrphan(n)
		return nil
	}
	return fs.deleteInode(n)
}

// deleteInode frees n's blocks, attribute block and inode number.
//
// Preconditions: fs.mu is held exclusively; n has no links.
func (fs *FS) deleteInode(n *inode) error {
	if err := fs.removeOrphan(n); err != nil {
		return err
	}
	if err := fs.truncateBlocks(n, 0); err != nil {
		return err
	}
	if err := fs.releaseXattrBlock(n); err != nil {
		return err
	}
	n.raw.SetLinks(0)
	n.raw.SetSize(0)
	n.raw.SetDtime(uint32(fs.now().Unix()))
	fs.markDirty(n)
	if err := fs.freeInode(n.ino, n.isDir()); err != nil {
		return err
	}
	fs.forgetInode(n)
	return nil
}

// IncRef records that the caller holds inode ino open. An inode that loses
// its last link while referenced keeps its data, on the orphan list, until
// the last DecRef.
func (fs *FS) IncRef(ino Ino) error {
	return fs.updateInode(ino, func(n *inode) error {
		n.refs++
		fs.inodeMu.Lock()
		if n.lru != nil {
			fs.icache.lru.Remove(n.lru)
			n.lru = nil
		}
		fs.inodeMu.Unlock()
		return nil
	})
}

// DecRef drops a reference taken by IncRef.
func (fs *FS) DecRef(ino Ino) error {
	return fs.updateInode(ino, fs.decRef)
}

// decRef is DecRef on n.
//
// Preconditions: fs.mu is held exclusively.
func (fs *FS) decRef(n *inode) error {
	if n.refs == 0 {
		return unix.EINVAL
	}
	n.refs--
	if n.refs > 0 {
		return nil
	}
	if n.raw.Links() == 0 {
		return fs.deleteInode(n)
	}
	fs.inodeMu.Lock()
	if !n.dirty && n.lru == nil && fs.icache.m[n.ino] == n {
		n.lru = fs.icache.lru.PushFront(n)
	}
	fs.inodeMu.Unlock()
	return nil
}
