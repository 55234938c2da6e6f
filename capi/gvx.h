/*
 * gvx.h — the C ABI of libgvx.
 *
 * libgvx lets C, Python (through ctypes) and any language with a C FFI
 * create and drive gvx sandboxes. A sandbox never runs inside the calling
 * process: libgvx starts `rungv` child processes and talks to them over
 * gvx's control protocol.
 *
 * Conventions (the same for every function):
 *   - Every function returns an int status: GVX_OK (0) or a negative
 *     GVX_E_* code.
 *   - On failure, if `err` is not NULL, *err receives a NUL-terminated
 *     message saying what went wrong and how to fix it. The caller frees it
 *     with gvx_free(). On success *err is set to NULL.
 *   - Strings returned through out-parameters are freed with gvx_free().
 *   - Objects are integer handles; 0 is never a valid handle.
 *   - A Go panic inside libgvx becomes GVX_E_INTERNAL; it never crashes
 *     the calling process.
 *   - All functions are thread-safe.
 */
#ifndef GVX_H
#define GVX_H

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define GVX_OK 0
#define GVX_E_INVALID (-1)  /* a bad argument: the message names it */
#define GVX_E_INTERNAL (-2) /* a bug in libgvx: please report the message */

/*
 * gvx_version stores libgvx's version string in *version (free it with
 * gvx_free).
 */
int gvx_version(char **version, char **err);

/* gvx_free frees a string libgvx returned. NULL is allowed. */
void gvx_free(void *p);

#ifdef __cplusplus
}
#endif

#endif /* GVX_H */
