// Package ext4fs is a gVisor filesystem type, "ext4", that serves an
// ext4lite filesystem (core/ext4lite): a real ext4 image in one host file
// that the Sentry reads and writes itself, with nothing mounted on the
// host.
//
// The loader opens the image before the sandbox is locked down, wraps the
// ext4lite.FS in a Volume and mounts it with InternalData{Volume: v}. The
// guest cannot mount the type itself: it has no way to name a Volume.
// Volume.Close, called by the loader once no guest task runs, writes back
// memory-mapped data and closes the ext4lite filesystem (commit,
// checkpoint, clean, discard freed blocks).
//
// ext4lite does no permission checks and no setgid or ACL inheritance;
// this package does them as Linux's VFS and ext4 would (umask is applied
// by gVisor's system call layer). I/O errors and corruption reported by
// ext4lite reach the guest as EIO.
//
// # Caching
//
// Dentries are a cache of the on-disk tree: a dentry exists for every
// name the VFS holds a reference to, for every directory with a cached
// child, and, up to a bound, for names looked up recently (an LRU of
// unreferenced dentries). Negative lookups are not cached; ext4lite's
// in-memory directory index answers them. Inodes exist while a dentry
// refers to them; their mode, owner and size are cached, since this
// package is the filesystem's only writer. File data is not cached except
// for pages of memory-mapped files, which live in the sandbox's memory
// file while mapped (read/write go to ext4lite and keep those pages
// coherent).
//
// # Locking
//
// Lock order:
//
//	filesystem.mu (the dentry tree: shared for lookups and creations,
//	    exclusive for unlink, rmdir, rename and eviction)
//	  dentry.childMu (a directory's cached children)
//	    filesystem.inodesMu, filesystem.cacheMu, filesystem.ancestryMu,
//	    filesystem.endpointsMu (leaves)
//	inode.ioMu (serializes writes, truncation and fallocate per file)
//	  *** memmap.Mappable locks (mm) below this point
//	  inode.mapsMu
//	    *** memmap.Mappable locks taken by Translate below this point
//	    inode.dataMu (the page cache of mapped files)
//	inode.attrMu (attribute and ACL changes)
//
// ext4lite's own locks are leaves below all of these. No lock of this
// package is held while copying to or from guest memory except inode.ioMu.
package ext4fs

//go:generate go run z.gfire.dev/gvx/core/internal/stategen
