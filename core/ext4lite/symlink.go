package ext4lite

import (
	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// Readlink returns a symbolic link's target.
func (fs *FS) Readlink(ino Ino) (target string, err error) {
	if err := fs.lockRead(); err != nil {
		return "", err
	}
	defer fs.unlockRead(&err)
	n, err := fs.getInode(ino)
	if err != nil {
		return "", err
	}
	if !n.raw.IsSymlink() {
		return "", unix.EINVAL
	}
	size := n.raw.Size()
	switch {
	case n.raw.Flags()&disk.FlagInlineData != 0:
		data, err := fs.inlineData(n)
		if err != nil {
			return "", err
		}
		return string(data), nil
	case size < disk.IBlockSize && n.raw.Flags()&disk.FlagExtents == 0:
		return string(n.raw.IBlock()[:size]), nil
	case size >= uint64(fs.geo.blockSize):
		return "", corruptf("symlink %d is %d bytes long", ino, size)
	}
	buf := make([]byte, size)
	if err := fs.readMapped(n, buf, 0); err != nil {
		return "", err
	}
	return string(buf), nil
}

// inlineData returns the data of an inline_data inode: the first 60 bytes
// in i_block, the rest in the system.data attribute.
func (fs *FS) inlineData(n *inode) ([]byte, error) {
	xs, err := disk.ParseInodeXattrs(n.raw)
	if err != nil {
		return nil, err
	}
	data := append([]byte(nil), n.raw.IBlock()...)
	for _, x := range xs {
		if x.Index == disk.InlineDataXattrIndex && x.Name == disk.InlineDataXattrNameStr {
			data = append(data, x.Value...)
		}
	}
	if uint64(len(data)) < n.raw.Size() {
		return nil, corruptf("inline data of inode %d shorter than its size", n.ino)
	}
	return data[:n.raw.Size()], nil
}
