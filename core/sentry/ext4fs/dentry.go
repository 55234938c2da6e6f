package ext4fs

import (
	"container/list"
	"gvisor.dev/gvisor/pkg/atomicbitops"
	"sync"

	"gvisor.dev/gvisor/pkg/abi/linux"
	"gvisor.dev/gvisor/pkg/context"
	"gvisor.dev/gvisor/pkg/sentry/vfs"
)

// dentry implements vfs.DentryImpl.
//
// Reference model: the VFS holds references; every dentry holds one on its
// parent and one on its inode. A dentry whose count drops to zero stays in
// its parent's children, on the filesystem's LRU, until evicted. refs == -1
// marks a destroyed dentry. A count goes from zero to one only with fs.mu
// held (lookups), and eviction holds fs.mu exclusively, so the two never
// race.
//
// +stateify savable
type dentry struct {
	vfsd vfs.Dentry

	refs atomicbitops.Int64

	fs    *filesystem
	inode *inode // immutable

	// parent and name are where the dentry is in the tree; parent is nil
	// for the root. They change with fs.mu held exclusively and
	// fs.ancestryMu held.
	parent *dentry
	name   string

	// removed is set once the dentry's name is gone (unlink, rmdir,
	// rename over it) or for an unnamed O_TMPFILE file. A removed dentry
	// is in no parent's children and is destroyed with its last
	// reference.
	removed atomicbitops.Bool

	// tmpfile marks the dentry of an O_TMPFILE file. Immutable.
	tmpfile bool

	// childMu protects children: a directory's dentries by name.
	childMu  sync.Mutex `state:"nosave"`
	children map[string]*dentry

	// lruElem is the dentry's element in fs.lru, or nil. Protected by
	// fs.cacheMu.
	lruElem *list.Element `state:"nosave"`
}

var _ vfs.DentryImpl = (*dentry)(nil)

// newDentry returns a dentry with no references, which takes over the
// caller's reference on i and, if parent is not nil, takes one on parent.
func (fs *filesystem) newDentry(parent *dentry, name string, i *inode) *dentry {
	d := &dentry{fs: fs, inode: i, parent: parent, name: name}
	if i.isDir() {
		d.children = make(map[string]*dentry)
	}
	d.vfsd.Init(d)
	if parent != nil {
		parent.IncRef()
	}
	return d
}

// isTmpfile reports whether d is an O_TMPFILE file's dentry.
func (d *dentry) isTmpfile() bool { return d.tmpfile }

// IncRef implements vfs.DentryImpl.IncRef.
func (d *dentry) IncRef() {
	if r := d.refs.Add(1); r <= 0 {
		panic("ext4fs: IncRef of a destroyed dentry")
	}
}

// TryIncRef implements vfs.DentryImpl.TryIncRef. A dentry without
// references is not revived: only a lookup (under fs.mu) may do that.
func (d *dentry) TryIncRef() bool {
	for {
		r := d.refs.Load()
		if r <= 0 {
			return false
		}
		if d.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// DecRef implements vfs.DentryImpl.DecRef.
func (d *dentry) DecRef(ctx context.Context) {
	r := d.refs.Add(-1)
	if r < 0 {
		panic("ext4fs: DecRef of a dentry without references")
	}
	if r == 0 {
		d.checkCaching(ctx)
	}
}

// checkCaching handles a dentry that lost its last reference: a removed
// dentry, or any dentry of a released filesystem, is destroyed; others go
// to the front of the LRU.
func (d *dentry) checkCaching(ctx context.Context) {
	fs := d.fs
	if d.removed.Load() || fs.released.Load() || d.parent == nil {
		if d.parent == nil && !fs.released.Load() {
			// The root keeps the filesystem's reference until Release.
			return
		}
		if !d.refs.CompareAndSwap(0, -1) {
			return
		}
		if !d.removed.Load() && d.parent != nil {
			d.parent.forgetChild(d)
		}
		d.destroy(ctx)
		return
	}
	if d.inode.watches.Size() > 0 {
		// Evicting d would lose its watches.
		return
	}
	fs.cacheMu.Lock()
	defer fs.cacheMu.Unlock()
	if d.refs.Load() != 0 {
		return
	}
	if d.lruElem == nil {
		d.lruElem = fs.lru.PushFront(d)
		fs.lruLen.Add(1)
	} else {
		fs.lru.MoveToFront(d.lruElem)
	}
}

// cacheNew puts a dentry just instantiated by a lookup on the LRU, so it
// can be evicted if nobody takes a reference.
func (d *dentry) cacheNew() {
	fs := d.fs
	fs.cacheMu.Lock()
	defer fs.cacheMu.Unlock()
	if d.lruElem == nil && d.refs.Load() == 0 {
		d.lruElem = fs.lru.PushFront(d)
		fs.lruLen.Add(1)
	}
}

// destroy releases a dentry claimed by setting refs to -1.
//
// Preconditions: d is in no parent's children.
func (d *dentry) destroy(ctx context.Context) {
	fs := d.fs
	fs.cacheMu.Lock()
	if d.lruElem != nil {
		fs.lru.Remove(d.lruElem)
		d.lruElem = nil
		fs.lruLen.Add(-1)
	}
	fs.cacheMu.Unlock()
	d.inode.decRef(ctx)
	if d.parent != nil {
		d.parent.DecRef(ctx)
	}
}

// maybeEvict evicts unreferenced dentries while the LRU is over its bound.
//
// Preconditions: fs.mu is not held.
func (fs *filesystem) maybeEvict(ctx context.Context) {
	if fs.lruLen.Load() <= maxCachedDentries {
		return
	}
	fs.mu.Lock()
	fs.evictLocked(ctx, maxCachedDentries*3/4)
	fs.mu.Unlock()
}

// evictLocked evicts dentries from the back of the LRU until at most keep
// remain. Evicting a dentry may put its parent on the LRU.
//
// Preconditions: fs.mu is held exclusively.
func (fs *filesystem) evictLocked(ctx context.Context, keep int64) {
	for fs.lruLen.Load() > keep {
		fs.cacheMu.Lock()
		e := fs.lru.Back()
		if e == nil {
			fs.cacheMu.Unlock()
			return
		}
		d := e.Value.(*dentry)
		fs.lru.Remove(e)
		d.lruElem = nil
		fs.lruLen.Add(-1)
		fs.cacheMu.Unlock()

		if d.inode.watches.Size() > 0 || !d.refs.CompareAndSwap(0, -1) {
			// In use again; it rejoins the LRU when released.
			continue
		}
		if !d.removed.Load() && d.parent != nil {
			d.parent.forgetChild(d)
		}
		d.destroy(ctx)
	}
}

// forgetChild removes child from d's children.
func (d *dentry) forgetChild(child *dentry) {
	d.childMu.Lock()
	if d.children[child.name] == child {
		delete(d.children, child.name)
	}
	d.childMu.Unlock()
}

// InotifyWithParent implements vfs.DentryImpl.InotifyWithParent.
func (d *dentry) InotifyWithParent(ctx context.Context, events, cookie uint32, et vfs.EventType) {
	if d.inode.isDir() {
		events |= linux.IN_ISDIR
	}
	d.fs.ancestryMu.RLock()
	parent, name := d.parent, d.name
	d.fs.ancestryMu.RUnlock()
	if parent != nil {
		parent.inode.watches.Notify(ctx, name, events, cookie, et, d.removed.Load())
	}
	d.inode.watches.Notify(ctx, "", events, cookie, et, d.removed.Load())
}

// Watches implements vfs.DentryImpl.Watches.
func (d *dentry) Watches() *vfs.Watches {
	return &d.inode.watches
}

// OnZeroWatches implements vfs.DentryImpl.OnZeroWatches.
func (d *dentry) OnZeroWatches(ctx context.Context) {
	if d.refs.Load() == 0 {
		d.checkCaching(ctx)
	}
}
