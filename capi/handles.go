package main

import (
	"sync"

	"z.gfire.dev/gvx/core/gvx"
)

// sandboxes maps the integer handles C callers hold to sandboxes. Handles
// are never reused, so a stale handle is always GVX_E_CLOSED.
var sandboxes = struct {
	sync.Mutex
	next uint64
	m    map[uint64]*gvx.Sandbox
}{m: make(map[uint64]*gvx.Sandbox)}

func addSandbox(sb *gvx.Sandbox) uint64 {
	sandboxes.Lock()
	defer sandboxes.Unlock()
	sandboxes.next++
	sandboxes.m[sandboxes.next] = sb
	return sandboxes.next
}

func getSandbox(h uint64) (*gvx.Sandbox, error) {
	sandboxes.Lock()
	defer sandboxes.Unlock()
	sb, ok := sandboxes.m[h]
	if !ok {
		return nil, &statusError{statusClosed, errClosedHandle(h)}
	}
	return sb, nil
}

// replaceSandbox points a handle at a new sandbox and returns the old one;
// it fails if the handle was closed meanwhile.
func replaceSandbox(h uint64, sb *gvx.Sandbox) (*gvx.Sandbox, error) {
	sandboxes.Lock()
	defer sandboxes.Unlock()
	old, ok := sandboxes.m[h]
	if !ok {
		return nil, &statusError{statusClosed, errClosedHandle(h)}
	}
	sandboxes.m[h] = sb
	return old, nil
}

// takeSandbox removes a handle, so that no new call can use it.
func takeSandbox(h uint64) (*gvx.Sandbox, error) {
	sandboxes.Lock()
	defer sandboxes.Unlock()
	sb, ok := sandboxes.m[h]
	if !ok {
		return nil, &statusError{statusClosed, errClosedHandle(h)}
	}
	delete(sandboxes.m, h)
	return sb, nil
}

type errClosedHandle uint64

func (h errClosedHandle) Error() string {
	if h == 0 {
		return "sandbox handle 0 is never valid: create a sandbox with gvx_sandbox_new"
	}
	return "the sandbox handle is closed or was never returned by gvx_sandbox_new: create a new sandbox"
}
