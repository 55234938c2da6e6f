// Command capi builds libgvx.so, the C ABI of gvx (see gvx.h, the
// contract). It is the only cgo code in gvx.
//
// Build: go build -buildmode=c-shared -o libgvx.so ./capi
package main

/*
#include <stdlib.h>
#include "gvx.h"
*/
import "C"

import (
	"fmt"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {}

// guard turns a panic into GVX_E_INTERNAL with the panic and stack in
// *errOut, so a bug in libgvx never takes the host process down.
func guard(status *C.int, errOut **C.char) {
	if r := recover(); r != nil {
		*status = C.GVX_E_INTERNAL
		setErr(errOut, fmt.Sprintf("libgvx internal error (please report): %v\n%s", r, debug.Stack()))
	}
}

func setErr(errOut **C.char, msg string) {
	if errOut != nil {
		*errOut = C.CString(msg)
	}
}

func clearErr(errOut **C.char) {
	if errOut != nil {
		*errOut = nil
	}
}

//export gvx_version
func gvx_version(out **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if out == nil {
		setErr(errOut, "gvx_version: version must not be NULL")
		return C.GVX_E_INVALID
	}
	*out = C.CString(version)
	return C.GVX_OK
}
