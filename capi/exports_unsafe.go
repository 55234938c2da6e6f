package main

/*
#include <stdlib.h>
#include "gvx.h"

// Exported parameters cannot be declared const in Go; these typedefs make
// cgo's declarations match gvx.h's.
typedef const char cchar_t;
typedef const uint8_t cuint8_t;
*/
import "C"

import (
	"fmt"
	"runtime/debug"
	"unsafe"
)

// Every export follows one shape: clear *err, recover from panics into
// GVX_E_INTERNAL, convert C arguments to Go, call the Go implementation,
// convert results back, and turn an error into its status and message.
// An export that is another with a default argument (owner NULL) only
// calls it, and so runs under its guard.

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

// fail reports err through errOut and returns its status.
func fail(err error, errOut **C.char) C.int {
	setErr(errOut, err.Error())
	return C.int(statusOf(err))
}

func nullArg(name string, errOut **C.char) C.int {
	return fail(invalid("%s must not be NULL", name), errOut)
}

func goString(s *C.cchar_t) string { return C.GoString((*C.char)(s)) }

// optString is goString for an optional argument: NULL is "".
func optString(s *C.cchar_t) string {
	if s == nil {
		return ""
	}
	return goString(s)
}

func goBytes(p *C.cuint8_t, n C.size_t) []byte {
	if p == nil {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(p), C.int(n))
}

// cBuffer copies b into C memory with a NUL after it.
func cBuffer(b []byte) (*C.uint8_t, C.size_t) {
	p := C.malloc(C.size_t(len(b) + 1))
	buf := unsafe.Slice((*byte)(p), len(b)+1)
	copy(buf, b)
	buf[len(b)] = 0
	return (*C.uint8_t)(p), C.size_t(len(b))
}

//export gvx_version
func gvx_version(out **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if out == nil {
		return nullArg("version", errOut)
	}
	*out = C.CString(version)
	return C.GVX_OK
}

//export gvx_free
func gvx_free(p unsafe.Pointer) {
	C.free(p)
}

//export gvx_sandbox_new
func gvx_sandbox_new(config *C.cchar_t, out *C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if config == nil || out == nil {
		return nullArg("config_json and sandbox", errOut)
	}
	h, err := sandboxNew(goString(config))
	if err != nil {
		return fail(err, errOut)
	}
	*out = C.uint64_t(h)
	return C.GVX_OK
}

//export gvx_sandbox_info
func gvx_sandbox_info(h C.uint64_t, out **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if out == nil {
		return nullArg("info", errOut)
	}
	info, err := sandboxInfo(uint64(h))
	if err != nil {
		return fail(err, errOut)
	}
	*out = C.CString(info)
	return C.GVX_OK
}

//export gvx_sandbox_stats
func gvx_sandbox_stats(h C.uint64_t, out **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if out == nil {
		return nullArg("stats", errOut)
	}
	st, err := sandboxStats(uint64(h))
	if err != nil {
		return fail(err, errOut)
	}
	*out = C.CString(st)
	return C.GVX_OK
}

//export gvx_sandbox_stat
func gvx_sandbox_stat(h C.uint64_t, path *C.cchar_t, out **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if path == nil || out == nil {
		return nullArg("path and info", errOut)
	}
	info, err := sandboxStat(uint64(h), goString(path))
	if err != nil {
		return fail(err, errOut)
	}
	*out = C.CString(info)
	return C.GVX_OK
}

//export gvx_sandbox_exec
func gvx_sandbox_exec(h C.uint64_t, request *C.cchar_t, stdin *C.cuint8_t, stdinLen C.size_t,
	result **C.char, stdout **C.uint8_t, stdoutLen *C.size_t, stderr **C.uint8_t, stderrLen *C.size_t,
	errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if request == nil || result == nil || stdout == nil || stdoutLen == nil || stderr == nil || stderrLen == nil {
		return nullArg("request_json, result and the output buffers", errOut)
	}
	res, out, errb, err := sandboxExec(uint64(h), goString(request), goBytes(stdin, stdinLen), nil)
	if err != nil {
		return fail(err, errOut)
	}
	*result = C.CString(res)
	*stdout, *stdoutLen = cBuffer(out)
	*stderr, *stderrLen = cBuffer(errb)
	return C.GVX_OK
}

//export gvx_sandbox_exec_stream
func gvx_sandbox_exec_stream(h C.uint64_t, request *C.cchar_t, stdin *C.cuint8_t, stdinLen C.size_t,
	onOutput C.gvx_output_fn, userdata unsafe.Pointer, result **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if request == nil || result == nil || onOutput == nil {
		return nullArg("request_json, on_output and result", errOut)
	}
	res, _, _, err := sandboxExec(uint64(h), goString(request), goBytes(stdin, stdinLen), func(stream int, data []byte) {
		callOutput(onOutput, userdata, stream, data)
	})
	if err != nil {
		return fail(err, errOut)
	}
	*result = C.CString(res)
	return C.GVX_OK
}

//export gvx_cancel_new
func gvx_cancel_new(token *C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if token == nil {
		return nullArg("token", errOut)
	}
	*token = C.uint64_t(newCancelToken())
	return C.GVX_OK
}

//export gvx_cancel
func gvx_cancel(token C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if err := cancelCalls(uint64(token)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_cancel_free
func gvx_cancel_free(token C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if err := freeCancelToken(uint64(token)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_sandbox_read_file
func gvx_sandbox_read_file(h C.uint64_t, path *C.cchar_t, data **C.uint8_t, n *C.size_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if path == nil || data == nil || n == nil {
		return nullArg("path, data and len", errOut)
	}
	b, err := sandboxReadFile(uint64(h), goString(path))
	if err != nil {
		return fail(err, errOut)
	}
	*data, *n = cBuffer(b)
	return C.GVX_OK
}

//export gvx_sandbox_write_file
func gvx_sandbox_write_file(h C.uint64_t, path *C.cchar_t, data *C.cuint8_t, n C.size_t, mode C.uint32_t, errOut **C.char) C.int {
	return gvx_sandbox_write_file_as(h, path, data, n, mode, nil, errOut)
}

//export gvx_sandbox_write_file_as
func gvx_sandbox_write_file_as(h C.uint64_t, path *C.cchar_t, data *C.cuint8_t, n C.size_t, mode C.uint32_t, owner *C.cchar_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if path == nil || (data == nil && n > 0) {
		return nullArg("path (and data, when len > 0)", errOut)
	}
	b := goBytes(data, n)
	if b == nil {
		b = []byte{}
	}
	if err := sandboxWriteFile(uint64(h), goString(path), b, uint32(mode), optString(owner)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_sandbox_upload
func gvx_sandbox_upload(h C.uint64_t, hostPath *C.cchar_t, path *C.cchar_t, mode C.int32_t, errOut **C.char) C.int {
	return gvx_sandbox_upload_as(h, hostPath, path, mode, nil, errOut)
}

//export gvx_sandbox_upload_as
func gvx_sandbox_upload_as(h C.uint64_t, hostPath *C.cchar_t, path *C.cchar_t, mode C.int32_t, owner *C.cchar_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if hostPath == nil || path == nil {
		return nullArg("host_path and path", errOut)
	}
	if err := sandboxUpload(uint64(h), goString(hostPath), goString(path), int32(mode), optString(owner)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_sandbox_download
func gvx_sandbox_download(h C.uint64_t, path *C.cchar_t, hostPath *C.cchar_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if path == nil || hostPath == nil {
		return nullArg("path and host_path", errOut)
	}
	if err := sandboxDownload(uint64(h), goString(path), goString(hostPath)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_sandbox_checkpoint
func gvx_sandbox_checkpoint(h C.uint64_t, hostPath *C.cchar_t, flags C.uint32_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if hostPath == nil {
		return nullArg("host_path", errOut)
	}
	if err := sandboxCheckpoint(uint64(h), goString(hostPath), uint32(flags)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_sandbox_signal
func gvx_sandbox_signal(h C.uint64_t, sig C.int, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if err := sandboxSignal(uint64(h), int(sig)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_sandbox_wait
func gvx_sandbox_wait(h C.uint64_t, exitCode *C.int, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if exitCode == nil {
		return nullArg("exit_code", errOut)
	}
	code, err := sandboxWait(uint64(h))
	if err != nil {
		return fail(err, errOut)
	}
	*exitCode = C.int(code)
	return C.GVX_OK
}

//export gvx_sandbox_reset
func gvx_sandbox_reset(h C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if err := sandboxReset(uint64(h)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_sandbox_close
func gvx_sandbox_close(h C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if err := sandboxClose(uint64(h)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_volume_create
func gvx_volume_create(path *C.cchar_t, size C.int64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if path == nil {
		return nullArg("path", errOut)
	}
	if err := volumeCreate(goString(path), int64(size)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_volume_clone
func gvx_volume_clone(golden, episode *C.cchar_t, method **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if golden == nil || episode == nil {
		return nullArg("golden and episode", errOut)
	}
	m, err := volumeClone(goString(golden), goString(episode))
	if err != nil {
		return fail(err, errOut)
	}
	if method != nil {
		*method = C.CString(m)
	}
	return C.GVX_OK
}

//export gvx_volume_flatten
func gvx_volume_flatten(episode, out *C.cchar_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if episode == nil || out == nil {
		return nullArg("episode and out", errOut)
	}
	if err := volumeFlatten(goString(episode), goString(out)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_volume_check
func gvx_volume_check(path *C.cchar_t, result **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if path == nil || result == nil {
		return nullArg("path and result", errOut)
	}
	r, err := volumeCheck(goString(path))
	if err != nil {
		return fail(err, errOut)
	}
	*result = C.CString(r)
	return C.GVX_OK
}

//export gvx_image_pull
func gvx_image_pull(ref *C.cchar_t, options *C.cchar_t, onProgress C.gvx_progress_fn, userdata unsafe.Pointer,
	out **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if ref == nil || out == nil {
		return nullArg("ref and image", errOut)
	}
	var opts string
	if options != nil {
		opts = goString(options)
	}
	var progress func(string)
	if onProgress != nil {
		progress = func(event string) { callProgress(onProgress, userdata, event) }
	}
	img, err := imagePull(goString(ref), opts, progress)
	if err != nil {
		return fail(err, errOut)
	}
	*out = C.CString(img)
	return C.GVX_OK
}

//export gvx_process_start
func gvx_process_start(sandbox C.uint64_t, request *C.cchar_t, out *C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if request == nil || out == nil {
		return nullArg("request_json and process", errOut)
	}
	h, err := processStart(uint64(sandbox), goString(request))
	if err != nil {
		return fail(err, errOut)
	}
	*out = C.uint64_t(h)
	return C.GVX_OK
}

//export gvx_process_write
func gvx_process_write(h C.uint64_t, data *C.cuint8_t, n C.size_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if data == nil && n > 0 {
		return nullArg("data", errOut)
	}
	if n == 0 {
		return C.GVX_OK
	}
	// The bytes are copied: the caller's buffer is free once this returns.
	if err := processWrite(uint64(h), goBytes(data, n)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_process_close_stdin
func gvx_process_close_stdin(h C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if err := processCloseStdin(uint64(h)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_process_read
func gvx_process_read(h C.uint64_t, stream C.int, buf *C.uint8_t, capacity C.size_t, timeoutMS C.int, cancel C.uint64_t,
	n *C.size_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if buf == nil || n == nil {
		return nullArg("buf and n", errOut)
	}
	*n = 0
	got, err := processRead(uint64(h), int(stream), unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(capacity)), int(timeoutMS), uint64(cancel))
	if err != nil {
		return fail(err, errOut)
	}
	*n = C.size_t(got)
	return C.GVX_OK
}

//export gvx_process_signal
func gvx_process_signal(h C.uint64_t, sig C.int, flags C.uint32_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if flags&^C.GVX_SIGNAL_DESCENDANTS != 0 {
		return fail(invalid("flags %#x has bits gvx.h does not define", uint32(flags)), errOut)
	}
	if err := processSignal(uint64(h), int(sig), flags&C.GVX_SIGNAL_DESCENDANTS != 0); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}

//export gvx_process_wait
func gvx_process_wait(h C.uint64_t, timeoutMS C.int, cancel C.uint64_t, result **C.char, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if result == nil {
		return nullArg("result", errOut)
	}
	res, err := processWait(uint64(h), int(timeoutMS), uint64(cancel))
	if err != nil {
		return fail(err, errOut)
	}
	*result = C.CString(res)
	return C.GVX_OK
}

//export gvx_process_close
func gvx_process_close(h C.uint64_t, errOut **C.char) (status C.int) {
	defer guard(&status, errOut)
	clearErr(errOut)
	if err := processClose(uint64(h)); err != nil {
		return fail(err, errOut)
	}
	return C.GVX_OK
}
