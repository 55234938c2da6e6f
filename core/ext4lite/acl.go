package ext4lite

import (
	"encoding/binary"

	"golang.org/x/sys/unix"

	"z.gfire.dev/gvx/core/ext4lite/disk"
)

// POSIX ACLs travel between user space and the filesystem in the
// posix_acl_xattr format (version 2, 8-byte entries) but ext4 stores them
// in its own compact format (version 1, 4-byte entries for tags without an
// id). These convert, so Linux reads the ACLs ext4lite writes.
const (
	aclXattrVersion = 2
	aclDiskVersion  = 1
	aclUser         = 0x02
	aclGroup        = 0x08
	aclUserObj      = 0x01
	aclGroupObj     = 0x04
	aclMask         = 0x10
	aclOther        = 0x20
)

func isACLName(index uint8) bool {
	return index == disk.XattrIndexACLAccess || index == disk.XattrIndexACLDefault
}

// aclToDisk converts a user-space ACL to ext4's format.
func aclToDisk(v []byte) ([]byte, error) {
	if len(v) < 4 || (len(v)-4)%8 != 0 || binary.LittleEndian.Uint32(v) != aclXattrVersion {
		return nil, unix.EINVAL
	}
	out := binary.LittleEndian.AppendUint32(nil, aclDiskVersion)
	for e := v[4:]; len(e) > 0; e = e[8:] {
		tag := binary.LittleEndian.Uint16(e)
		out = append(out, e[:4]...)
		switch tag {
		case aclUser, aclGroup:
			out = append(out, e[4:8]...)
		case aclUserObj, aclGroupObj, aclMask, aclOther:
		default:
			return nil, unix.EINVAL
		}
	}
	return out, nil
}

// aclFromDisk converts an ext4 ACL to the user-space format.
func aclFromDisk(v []byte) ([]byte, error) {
	if len(v) < 4 || binary.LittleEndian.Uint32(v) != aclDiskVersion {
		return nil, corruptf("ACL has a bad header")
	}
	out := binary.LittleEndian.AppendUint32(nil, aclXattrVersion)
	for e := v[4:]; len(e) > 0; {
		if len(e) < 4 {
			return nil, corruptf("ACL entry truncated")
		}
		tag := binary.LittleEndian.Uint16(e)
		out = append(out, e[:4]...)
		switch tag {
		case aclUser, aclGroup:
			if len(e) < 8 {
				return nil, corruptf("ACL entry truncated")
			}
			out = append(out, e[4:8]...)
			e = e[8:]
		case aclUserObj, aclGroupObj, aclMask, aclOther:
			out = binary.LittleEndian.AppendUint32(out, 0xFFFFFFFF)
			e = e[4:]
		default:
			return nil, corruptf("ACL entry with tag %#x", tag)
		}
	}
	return out, nil
}
