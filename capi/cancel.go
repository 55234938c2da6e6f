package main

import (
	"context"
	"fmt"
	"sync"
)

// cancelTokens maps the integer tokens C callers hold to the contexts of
// the calls that name them. Tokens are never reused, so a stale one is
// always GVX_E_CLOSED.
var cancelTokens = struct {
	sync.Mutex
	next uint64
	m    map[uint64]cancelToken
}{m: make(map[uint64]cancelToken)}

// cancelToken is a context that gvx_cancel ends.
type cancelToken struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func errClosedToken(t uint64) error {
	return &statusError{statusClosed, fmt.Errorf("cancel token %d is not one gvx_cancel_new gave, or was freed", t)}
}

// newCancelToken makes a token whose context is live until cancelToken or
// freeCancelToken.
func newCancelToken() uint64 {
	ctx, cancel := context.WithCancel(context.Background())
	cancelTokens.Lock()
	defer cancelTokens.Unlock()
	cancelTokens.next++
	cancelTokens.m[cancelTokens.next] = cancelToken{ctx, cancel}
	return cancelTokens.next
}

// tokenContext returns the context of token t; 0 is no token, a context
// never cancelled.
func tokenContext(t uint64) (context.Context, error) {
	if t == 0 {
		return context.Background(), nil
	}
	cancelTokens.Lock()
	defer cancelTokens.Unlock()
	ct, ok := cancelTokens.m[t]
	if !ok {
		return nil, errClosedToken(t)
	}
	return ct.ctx, nil
}

// cancelCalls ends the calls that named token t; the token stays cancelled.
func cancelCalls(t uint64) error {
	cancelTokens.Lock()
	ct, ok := cancelTokens.m[t]
	cancelTokens.Unlock()
	if !ok {
		return errClosedToken(t)
	}
	ct.cancel()
	return nil
}

// freeCancelToken forgets token t, cancelling any call still naming it.
func freeCancelToken(t uint64) error {
	cancelTokens.Lock()
	ct, ok := cancelTokens.m[t]
	delete(cancelTokens.m, t)
	cancelTokens.Unlock()
	if !ok {
		return errClosedToken(t)
	}
	ct.cancel()
	return nil
}
