package main

/*
#include <stdlib.h>
*/
import "C"

import "unsafe"

//export gvx_free
func gvx_free(p unsafe.Pointer) {
	C.free(p)
}
