// Package disk encodes and decodes the on-disk structures of ext4: the
// superblock, group descriptors, inodes, extent tree nodes, directory blocks
// (linear and htree), extended attributes, and their checksums.
//
// The layouts follow the kernel's Documentation/filesystems/ext4/. Decoders
// never trust the bytes they are given: every offset and length is checked,
// and malformed input yields an error wrapping ErrCorrupt, never a panic.
//
// Structures that the filesystem rewrites in place (superblock, group
// descriptor, inode) are kept as their raw bytes with accessors, so fields
// this package does not know survive a read-modify-write unchanged.
package disk
