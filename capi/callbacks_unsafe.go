package main

/*
#include <stdlib.h>
#include "gvx.h"

// Go cannot call C function pointers; these do it. They are static, and
// this file exports nothing, so they are defined once.
static void gvx_call_output(gvx_output_fn f, void *userdata, int stream, const uint8_t *data, size_t len) {
	f(userdata, stream, data, len);
}

static void gvx_call_progress(gvx_progress_fn f, void *userdata, const char *event) {
	f(userdata, event);
}
*/
import "C"

import "unsafe"

// callOutput passes data to a C output callback without copying: the
// callback may only use it during the call.
func callOutput(f C.gvx_output_fn, userdata unsafe.Pointer, stream int, data []byte) {
	if len(data) == 0 {
		return
	}
	C.gvx_call_output(f, userdata, C.int(stream), (*C.uint8_t)(unsafe.Pointer(&data[0])), C.size_t(len(data)))
}

func callProgress(f C.gvx_progress_fn, userdata unsafe.Pointer, event string) {
	cs := C.CString(event)
	defer C.free(unsafe.Pointer(cs))
	C.gvx_call_progress(f, userdata, cs)
}
