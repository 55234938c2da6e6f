package disk

import "hash/crc32"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Crc32c continues a crc32c the way the kernel's crc32c(seed, p, len) does:
// without the pre- and post-inversion that hash/crc32 applies. ext4 and jbd2
// checksums are all chains of this function.
func Crc32c(seed uint32, p []byte) uint32 {
	return ^crc32.Update(^seed, castagnoli, p)
}

// crc16Table is the table of the reflected ANSI CRC-16 (polynomial 0x8005),
// which the uninit_bg (gdt_csum) feature uses for group descriptors.
var crc16Table = func() [256]uint16 {
	var t [256]uint16
	for i := range t {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xA001
			} else {
				c >>= 1
			}
		}
		t[i] = c
	}
	return t
}()

// Crc16 continues a CRC-16 as e2fsprogs' ext2fs_crc16 does.
func Crc16(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc = crc>>8 ^ crc16Table[byte(crc)^b]
	}
	return crc
}
