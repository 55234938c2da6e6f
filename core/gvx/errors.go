package gvx

import "z.gfire.dev/gvx/core/control"

// Error is how a request to a sandbox failed: a Code, below, and a
// message that says what to do. Errors wrap it; IsCode finds it.
type Error = control.Error

// Error codes: what kind of failure an Error is. They are the control
// protocol's, under the SDK's name.
const (
	CodeInvalid     = control.CodeInvalid     // a bad argument; the message names it
	CodeNotFound    = control.CodeNotFound    // no such file or exec
	CodePermission  = control.CodePermission  // denied inside the sandbox
	CodeUnavailable = control.CodeUnavailable // the sandbox is shutting down or gone
	CodeUnsupported = control.CodeUnsupported // unknown method or version
	CodeInternal    = control.CodeInternal    // a bug; the message says where
	CodeTimeout     = control.CodeTimeout     // a deadline passed
	CodeExists      = control.CodeExists      // a file exists where it must not
	CodeIsDir       = control.CodeIsDir       // a directory where a file was expected
	CodeNoSpace     = control.CodeNoSpace     // the sandbox's file system or memory limit is full
)

// IsCode reports whether err is, or wraps, an *Error with the given code.
func IsCode(err error, code string) bool { return control.IsCode(err, code) }

// SourceError is the failure of the reader that a file or archive sent to
// the sandbox came from (the caller's, not the sandbox's), which aborted
// the request: WriteFile, CopyIn and UploadDir return it wrapped.
type SourceError = control.SourceError
