// Command capi builds libgvx.so, the C ABI of gvx (see gvx.h, the
// contract). It is the only cgo code in gvx.
//
// The exported functions (exports_unsafe.go) only convert between C and Go
// values and catch panics; the work is done in plain Go (sandbox.go,
// image.go) on top of the Go SDK, core/gvx.
//
// Build: go build -buildmode=c-shared -o libgvx.so ./capi
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"z.gfire.dev/gvx/core/gvx"
	"z.gfire.dev/gvx/core/spec"
	"z.gfire.dev/gvx/core/store"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {}

// Status codes, as gvx.h defines them.
const (
	statusOK          = 0
	statusInvalid     = -1
	statusInternal    = -2
	statusNotFound    = -3
	statusClosed      = -4
	statusUnavailable = -5
	statusTimeout     = -6
	statusPermission  = -7
	statusStart       = -8
	statusCanceled    = -9
	statusNoSpace     = -10
)

// statusError is an error with the status code a C caller receives.
type statusError struct {
	status int
	err    error
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

func invalid(format string, args ...any) error {
	return &statusError{statusInvalid, fmt.Errorf(format, args...)}
}

// statusOf maps an error to its status code.
func statusOf(err error) int {
	var se *statusError
	switch {
	case err == nil:
		return statusOK
	case errors.As(err, &se):
		return se.status
	case errors.Is(err, gvx.ErrClosed):
		return statusClosed
	case errors.Is(err, gvx.ErrStopFailed):
		// Close's: the sandbox is gone, but did not stop cleanly.
		return statusUnavailable
	case errors.Is(err, context.Canceled):
		return statusCanceled
	case errors.Is(err, context.DeadlineExceeded), gvx.IsCode(err, gvx.CodeTimeout):
		return statusTimeout
	case gvx.IsCode(err, gvx.CodeNotFound), errors.Is(err, store.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return statusNotFound
	case gvx.IsCode(err, gvx.CodeInvalid), errors.As(err, new(*spec.FieldError)):
		return statusInvalid
	case gvx.IsCode(err, gvx.CodePermission):
		return statusPermission
	case gvx.IsCode(err, gvx.CodeUnavailable):
		return statusUnavailable
	case gvx.IsCode(err, gvx.CodeNoSpace):
		return statusNoSpace
	case errors.As(err, new(*gvx.SourceError)):
		// The caller's file could not be read (an I/O error, a file that
		// is not what it claimed): an argument's fault, not gvx's.
		return statusInvalid
	}
	return statusInternal
}

// decodeJSON decodes a JSON argument strictly: unknown keys are mistakes.
func decodeJSON(what, s string, v any) error {
	if strings.TrimSpace(s) == "" {
		s = "{}"
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalid("%s: %v (see gvx.h for the keys)", what, err)
	}
	return nil
}

func encodeJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own result types are encoded
	}
	return string(b)
}
