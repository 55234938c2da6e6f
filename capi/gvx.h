/*
 * gvx.h — the C ABI of libgvx.
 *
 * libgvx lets C, Python (through ctypes) and any language with a C FFI
 * create and drive gvx sandboxes. A sandbox never runs inside the calling
 * process: libgvx starts one `rungv` child process per sandbox and talks to
 * it over gvx's control protocol. Children die with the calling process.
 *
 * Conventions (the same for every function):
 *   - Every function returns an int status: GVX_OK (0) or a negative
 *     GVX_E_* code.
 *   - On failure, if `err` is not NULL, *err receives a NUL-terminated
 *     message saying what went wrong and how to fix it; the caller frees it
 *     with gvx_free(). On success *err is set to NULL.
 *   - Strings and buffers returned through out-parameters are freed with
 *     gvx_free(). Returned buffers are NUL-terminated beyond their length,
 *     so text output can be used as a C string.
 *   - Structured arguments and results are JSON objects (UTF-8); the keys
 *     are documented at each function. Unknown keys are refused.
 *   - Objects are integer handles; 0 is never a valid handle. A closed
 *     handle gives GVX_E_CLOSED.
 *   - A Go panic inside libgvx becomes GVX_E_INTERNAL; it never crashes
 *     the calling process.
 *   - All functions are thread-safe; a long call blocks only its thread.
 *   - Do not call libgvx in a child forked after the library ran in its
 *     parent: libgvx is Go code, Go's runtime keeps its threads in the
 *     parent, and the child's call would hang. Fork and exec (posix_spawn)
 *     workers, or load the library only in them. (The Python package
 *     detects such a child and raises gvx.ForkedProcessError.)
 */
#ifndef GVX_H
#define GVX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. */
#define GVX_OK 0
#define GVX_E_INVALID (-1)     /* a bad argument: the message names it */
#define GVX_E_INTERNAL (-2)    /* a bug in libgvx: please report the message */
#define GVX_E_NOT_FOUND (-3)   /* no such image or file (a missing command is exit code 127) */
#define GVX_E_CLOSED (-4)      /* the handle is closed or was never valid */
#define GVX_E_UNAVAILABLE (-5) /* the sandbox exited, cannot be reached, or did not stop cleanly */
#define GVX_E_TIMEOUT (-6)     /* a deadline passed */
#define GVX_E_PERMISSION (-7)  /* denied inside the sandbox */
#define GVX_E_START (-8)       /* the sandbox could not start: the message says why */
#define GVX_E_CANCELED (-9)    /* gvx_cancel ended the call */
#define GVX_E_NO_SPACE (-10)   /* the sandbox's file system or memory limit is full */

/* Streams passed to gvx_output_fn. */
#define GVX_STDOUT 1
#define GVX_STDERR 2

/*
 * gvx_version stores libgvx's version string in *version.
 */
int gvx_version(char **version, char **err);

/* gvx_free frees a string or buffer libgvx returned. NULL is allowed. */
void gvx_free(void *p);

/*
 * gvx_sandbox_new starts a sandbox and stores its handle in *sandbox once
 * it runs. config_json is the sandbox's spec (Go: core/spec.Sandbox, whose
 * Validate names the field at fault) plus "rungv", "cache" and "insecure".
 * Its keys (all optional but "image"):
 *   "image": string            image reference: registry ref, oci:DIR[:TAG],
 *                              docker-archive:FILE.tar[:REF]
 *   "entrypoint": [string]     replaces the image's entrypoint
 *   "cmd": [string]            replaces the image's command
 *   "env": [string]            "KEY=VALUE" entries added to the image's
 *   "workdir", "user", "hostname": string
 *   "keep_alive": bool         an idle init; drive the sandbox with exec
 *   "platform": string         "auto", "systrap", "kvm" or "ptrace"
 *   "spin": bool or null       systrap's threads spin while guest and Sentry wait
 *                              for each other: faster system calls for a lone busy
 *                              sandbox, CPU taken from the others when more are busy
 *                              than there are CPUs. null (default): spin unless the
 *                              host's CPUs are oversubscribed as the sandbox starts,
 *                              and while no more than twice as many sandboxes as the host
 *                              has usable CPUs spin, in any process
 *   "network": string          "none" (loopback only) or "nat" (eth0 with a user-space NAT)
 *   "ports": [object]          published guest ports: {"guest_port", and "host_path"
 *                              (a unix socket) or "host_port" (0 or absent: the host
 *                              picks a free one; gvx_sandbox_info says which) with
 *                              optional "host_ip", optional "protocol" "tcp"|"udp"}
 *   "allow_net": [string]      with "nat": the only destinations, CIDR[:PORT]
 *   "host_loopback": bool      with "nat": 10.0.2.2 reaches the host's 127.0.0.1
 *   "net_raw": bool            raw and packet sockets for guest root
 *   "nftables": bool           gVisor's nftables (iptables-nft); dockerd with its
 *                              defaults needs it and "net_raw"
 *   "allow_packet_socket_write": bool  packet sockets may send; needs "net_raw"
 *   "allow_suid": bool         honour set-user-ID and set-group-ID bits
 *   "mounts": [object]         volumes: {"type": "volume", "source" (an ext4 image
 *                              file), "target" (a path in the sandbox), "readonly"}
 *   "memory": integer          bytes for the whole sandbox
 *   "cpus": number             CPUs the guest sees (default: as many as "cpuset"
 *                              names, else the host's)
 *   "cpuset": [integer]        host CPUs the sandbox runs on (docker's --cpuset-cpus);
 *                              one CPU per sandbox shortens its system calls and execs
 *   "pids_limit": integer      tasks (threads included) in the sandbox; 0 or
 *                              absent: 2048, -1: no limit
 *   "timeout": number          seconds until the sandbox is stopped
 *   "rungv", "cache": string   the rungv binary and the image cache directory
 *   "insecure": bool           plain-HTTP registries
 *   "restore": string          a snapshot file (gvx_sandbox_checkpoint) to continue
 *                              instead of starting: give "image", "mounts" (clones of
 *                              the saved volumes) and the network fields it was taken
 *                              with; "keep_alive", "cmd" and "entrypoint" must be unset
 */
int gvx_sandbox_new(const char *config_json, uint64_t *sandbox, char **err);

/*
 * gvx_sandbox_info stores a JSON object describing the sandbox in *info:
 * "id", "pid" (the rungv process), "image", "hostname", "platform",
 * "spinning" (see "spin"), "rungv", and "ports": the published ports as
 * bound, [{"host_path"} or {"host_ip", "host_port"}, "guest_port",
 * "protocol"], a host port the host picked filled in.
 */
int gvx_sandbox_info(uint64_t sandbox, char **info, char **err);

/*
 * gvx_sandbox_stats stores the sandbox's resource use in *stats as JSON:
 * "memory_usage" (bytes held on the host), "memory_limit", "oom_kills",
 * "tasks" (guest threads), "pids_limit".
 */
int gvx_sandbox_stats(uint64_t sandbox, char **stats, char **err);

/*
 * gvx_sandbox_exec runs a command in the sandbox and waits for it.
 * request_json is what runs, core/spec.Exec (whose fields and their JSON
 * keys are the list of exec options, and whose Validate names the field at
 * fault), plus how the caller takes it. Its keys:
 *   "argv": [string]           required
 *   "env": [string]            "KEY=VALUE" entries added to the sandbox's environment
 *   "cwd", "user": string
 *   "timeout": number          seconds; the command (not the sandbox) is killed
 *   ...                        and every other field of core/spec.Exec
 *   "max_output": integer      bytes kept of stdout and of stderr, each; beyond
 *                              it the middle is left out (0: everything)
 *   "cancel": integer          a token from gvx_cancel_new: gvx_cancel(token)
 *                              from another thread kills the command and makes
 *                              this call return GVX_E_CANCELED at once
 * stdin_data/stdin_len is the command's input (NULL: none). On success
 * *result receives {"exit_code", "signal", "timed_out", "truncated",
 * "duration" (seconds)}, and the stdout and stderr buffers and lengths the captured
 * output. A non-zero exit code is a result, not an error; so is a command
 * that cannot start, as with docker exec: exit code 127 when it does not
 * exist, 126 when it is not executable, and stderr saying so (e.g.
 * gvx: exec: "x": executable file not found in $PATH).
 */
int gvx_sandbox_exec(uint64_t sandbox, const char *request_json, const uint8_t *stdin_data, size_t stdin_len,
                     char **result, uint8_t **stdout_data, size_t *stdout_len, uint8_t **stderr_data,
                     size_t *stderr_len, char **err);

/*
 * gvx_output_fn receives output as a command writes it: stream is
 * GVX_STDOUT or GVX_STDERR; data is valid only during the call. It is
 * called from a libgvx thread, never concurrently for one exec, and should
 * return quickly.
 */
typedef void (*gvx_output_fn)(void *userdata, int stream, const uint8_t *data, size_t len);

/*
 * gvx_sandbox_exec_stream is gvx_sandbox_exec with output delivered to
 * on_output as it arrives instead of captured.
 */
int gvx_sandbox_exec_stream(uint64_t sandbox, const char *request_json, const uint8_t *stdin_data,
                            size_t stdin_len, gvx_output_fn on_output, void *userdata, char **result,
                            char **err);

/*
 * Cancel tokens stop long calls from another thread, as a Ctrl-C handler
 * needs: gvx_cancel_new stores a new token in *token; a call whose request
 * names it ("cancel") returns GVX_E_CANCELED once gvx_cancel(token) is
 * called, and its command is killed. A cancelled token stays cancelled.
 * gvx_cancel_free forgets a token (cancelling what still names it); an
 * unknown or freed token gives GVX_E_CLOSED.
 */
int gvx_cancel_new(uint64_t *token, char **err);
int gvx_cancel(uint64_t token, char **err);
int gvx_cancel_free(uint64_t token, char **err);

/*
 * gvx_sandbox_stat describes the file at path, following symlinks, as JSON in
 * *info: {"path", "mode" (type and permission bits, as stat(2)), "size",
 * "uid", "gid", "mtime" (seconds since the epoch)}. A missing file gives
 * GVX_E_NOT_FOUND. It costs one round trip to the sandbox, no process.
 */
int gvx_sandbox_stat(uint64_t sandbox, const char *path, char **info, char **err);

/* gvx_sandbox_read_file stores a file's content in *data and *len. */
int gvx_sandbox_read_file(uint64_t sandbox, const char *path, uint8_t **data, size_t *len, char **err);

/*
 * gvx_sandbox_write_file creates or replaces a file with len bytes of data,
 * whole or not at all: a failed call leaves path as it was, and a replaced
 * file is a new file (its mode, owner and other hard links do not carry
 * over; a symlink at path is followed). mode is the permission bits (0
 * means 0644), optionally with GVX_WRITE_MAKE_PARENTS: missing directories
 * on the way are made (0755, owned by root), as `mkdir -p` would. Without
 * it a missing directory gives GVX_E_NOT_FOUND.
 */
#define GVX_WRITE_MAKE_PARENTS (1u << 16)
int gvx_sandbox_write_file(uint64_t sandbox, const char *path, const uint8_t *data, size_t len, uint32_t mode,
                           char **err);

/*
 * gvx_sandbox_write_file_as is gvx_sandbox_write_file with the file, and the
 * directories GVX_WRITE_MAKE_PARENTS makes, belonging to owner instead of
 * root. owner is a user as gvx_sandbox_exec's "user" names one, resolved in
 * the sandbox the same way: "uid[:gid]" or "name[:group]", either part a
 * number or a name from the image's /etc/passwd and /etc/group; a user
 * without a group takes its passwd entry's (or 0 for a uid the image does
 * not list). NULL or "" means root. A name the image does not have gives
 * GVX_E_INVALID, naming it.
 */
int gvx_sandbox_write_file_as(uint64_t sandbox, const char *path, const uint8_t *data, size_t len, uint32_t mode,
                              const char *owner, char **err);

/*
 * gvx_sandbox_upload copies the host file host_path into the sandbox at path,
 * streaming it (a file of any size is never held in memory), whole or not
 * at all as gvx_sandbox_write_file. mode is the permission bits, or -1 to
 * keep the host file's.
 *
 * If host_path is a directory, its contents are copied into the directory
 * path (created with its parents if missing), like `rsync -a host_path/
 * path/` without deletions: files belong to root and keep their permission
 * bits (set-user-ID too) and times, symlinks stay symlinks and keep their
 * times, hard links stay links and a file's holes stay holes (they are not
 * sent); mode must be -1. A device, FIFO
 * or socket in the tree fails the call with GVX_E_INVALID before anything
 * is copied.
 *
 * A host file that cannot be opened or fails while it is read (EIO, say)
 * also gives GVX_E_INVALID, with the file and the host's error in *err.
 */
int gvx_sandbox_upload(uint64_t sandbox, const char *host_path, const char *path, int32_t mode, char **err);

/*
 * gvx_sandbox_upload_as is gvx_sandbox_upload with what it makes belonging
 * to owner instead of root (see gvx_sandbox_write_file_as): the file, or
 * for a directory every file, directory and symlink copied in and every
 * missing directory made on the way. An existing directory on the way
 * keeps its owner, but path itself, standing for the host directory,
 * becomes owner's.
 */
int gvx_sandbox_upload_as(uint64_t sandbox, const char *host_path, const char *path, int32_t mode, const char *owner,
                          char **err);

/*
 * gvx_sandbox_download copies the file or directory at path in the sandbox to
 * host_path, streaming it. A file replaces host_path; a directory's contents
 * are copied into the directory host_path (created if missing). The guest
 * is not trusted: nothing is written outside host_path whatever its names
 * and symlinks say (a hard link reaches only a file of the copy), files
 * belong to the caller, set-user-ID and set-group-ID bits are dropped, and
 * devices and FIFOs are left out. Hard links, holes, and the times of
 * files, directories and symlinks are kept.
 */
int gvx_sandbox_download(uint64_t sandbox, const char *path, const char *host_path, char **err);

/*
 * gvx_sandbox_checkpoint writes a snapshot of the sandbox to the host file
 * host_path (whole or not at all): its kernel, every process with its
 * memory, and its root's writable layer. A sandbox created with "restore"
 * set to host_path continues it without starting its programs again. The
 * sandbox must have no exec running (GVX_E_INVALID otherwise). With
 * GVX_CHECKPOINT_STOP the sandbox ends once the snapshot is written; a
 * sandbox with volumes must stop, each volume's image then being the
 * snapshot's other half, to clone for each restore. Connections in
 * progress through published ports and the NAT are closed.
 */
#define GVX_CHECKPOINT_STOP (1u << 0)
int gvx_sandbox_checkpoint(uint64_t sandbox, const char *host_path, uint32_t flags, char **err);

/* gvx_sandbox_signal sends a signal to the sandbox's init process. */
int gvx_sandbox_signal(uint64_t sandbox, int signal, char **err);

/*
 * gvx_sandbox_wait waits for the sandbox's init process to exit and stores
 * its exit code (128+N after signal N) in *exit_code.
 */
int gvx_sandbox_wait(uint64_t sandbox, int *exit_code, char **err);

/*
 * gvx_sandbox_reset replaces the sandbox behind the handle with a fresh one
 * started from the same configuration, then closes the old one: every
 * process and every write to the root filesystem are gone; volumes keep
 * what was written to them (clone a golden volume per episode for fresh
 * state, see gvx_volume_clone). The handle stays valid. Once the fresh
 * sandbox is in place the reset succeeds, even if the old sandbox did not
 * stop cleanly (which gvx_sandbox_close would report).
 */
int gvx_sandbox_reset(uint64_t sandbox, char **err);

/*
 * gvx_sandbox_close stops the sandbox (SIGTERM, then SIGKILL after a grace
 * period), waits for its process and releases the handle. Calls in
 * progress on other threads return GVX_E_UNAVAILABLE. Closing a closed
 * handle returns GVX_E_CLOSED.
 *
 * If the sandbox did not stop cleanly, it returns GVX_E_UNAVAILABLE and
 * *err says what happened: its process had to be killed, ended before it
 * reported the sandbox's end (killed from outside, or crashed), or could
 * not write back the sandbox's volumes, which then keep their last
 * committed state. The handle is released all the same.
 */
int gvx_sandbox_close(uint64_t sandbox, char **err);

/*
 * Processes: a command that runs while the caller writes its stdin and
 * reads its output as it comes (a shell that keeps its state between
 * commands, a REPL, a server).
 *
 * gvx_process_start starts a command and stores its handle in *process.
 * request_json is gvx_sandbox_exec's request without "max_output" and
 * "cancel": "argv" (required), "env", "cwd", "user", "timeout" (the
 * command is killed at it), "umask", "stderr_to_stdout". A command that
 * cannot start runs as with gvx_sandbox_exec: exit code 127 or 126, with
 * why on its stderr. Every handle must be closed with gvx_process_close,
 * which kills the command if it still runs.
 */
int gvx_process_start(uint64_t sandbox, const char *request_json, uint64_t *process, char **err);

/*
 * gvx_process_write sends data to the command's stdin, in order; it
 * returns once the data is on its way. Writing to a command that ended
 * returns GVX_E_UNAVAILABLE. gvx_process_close_stdin gives the command end
 * of file.
 */
int gvx_process_write(uint64_t process, const uint8_t *data, size_t len, char **err);
int gvx_process_close_stdin(uint64_t process, char **err);

/*
 * gvx_process_read copies up to cap bytes of the command's output on
 * stream (GVX_STDOUT or GVX_STDERR) into buf and stores their count in *n,
 * waiting for some if none has come: *n is 0 once the stream has ended.
 * It waits at most timeout_ms milliseconds (negative: no limit), then
 * returns GVX_E_TIMEOUT; with a token from gvx_cancel_new, gvx_cancel
 * ends the wait with GVX_E_CANCELED (cancel 0: none). Neither touches the
 * command. Output waits for its reader: a stream nobody reads holds up the
 * command once 1 MiB of it is waiting, as a full pipe would. Closing the
 * handle ends a read in progress with GVX_E_CLOSED.
 */
int gvx_process_read(uint64_t process, int stream, uint8_t *buf, size_t cap, int timeout_ms, uint64_t cancel,
                     size_t *n, char **err);

/*
 * gvx_process_signal sends signal to the command and every process it
 * started or, with GVX_SIGNAL_DESCENDANTS, only to the processes it
 * started: a terminal's Ctrl-C to the job a shell runs, which a shell
 * reading commands from its stdin survives with its working directory and
 * variables. Signalling a command that ended returns GVX_E_UNAVAILABLE.
 */
#define GVX_SIGNAL_DESCENDANTS (1u << 0)
int gvx_process_signal(uint64_t process, int signal, uint32_t flags, char **err);

/*
 * gvx_process_wait waits for the command to end, at most timeout_ms
 * milliseconds (negative: no limit; GVX_E_TIMEOUT after it, the command
 * running on) or until gvx_cancel(cancel), and stores in *result
 * gvx_sandbox_exec's result JSON ("exit_code", "signal", "timed_out",
 * "duration"). Its output is what gvx_process_read returned and returns
 * until the end of each stream. It may be called again.
 */
int gvx_process_wait(uint64_t process, int timeout_ms, uint64_t cancel, char **result, char **err);

/*
 * gvx_process_close kills the command if it still runs, without waiting
 * for it, and releases the handle: output not read is dropped, and calls
 * in progress on other threads return GVX_E_CLOSED. Closing a closed
 * handle returns GVX_E_CLOSED.
 */
int gvx_process_close(uint64_t process, char **err);

/*
 * Volumes: single-file ext4 images that sandboxes mount and the Sentry reads
 * and writes itself. These are file operations in the calling process; no
 * sandbox is involved.
 */

/* gvx_volume_create makes a sparse ext4 image of size bytes at path. */
int gvx_volume_create(const char *path, int64_t size, char **err);

/*
 * gvx_volume_clone makes episode a writable copy of golden in O(1): a
 * reflink where the host filesystem supports it, otherwise a copy-on-write
 * delta over the (never written) golden. *method, if method is not NULL,
 * receives "reflink" or "delta".
 */
int gvx_volume_clone(const char *golden, const char *episode, char **method, char **err);

/* gvx_volume_flatten writes an episode (image or delta) as a standalone image at out. */
int gvx_volume_flatten(const char *episode, const char *out, char **err);

/*
 * gvx_volume_check checks an image (e2fsck -fn when installed) and stores
 * {"checker", "clean", "needs_recovery", "problems"} in *result.
 */
int gvx_volume_check(const char *path, char **result, char **err);

/*
 * gvx_progress_fn receives pull progress as a JSON object: "kind"
 * ("resolved", "cached", "waiting", "layer", "writing", "done"), "ref",
 * "id", and for "layer": "layer", "layers", "done", "size" (bytes).
 */
typedef void (*gvx_progress_fn)(void *userdata, const char *event_json);

/*
 * gvx_image_pull converts an image into the cache (a no-op if cached) and
 * stores {"id", "erofs", "size", "layers", "files", "refs", "xattr_files"}
 * in *image. options_json keys: "cache" (directory), "insecure" (bool),
 * "platform" ("linux/amd64"). options_json and on_progress may be NULL.
 */
int gvx_image_pull(const char *ref, const char *options_json, gvx_progress_fn on_progress, void *userdata,
                   char **image, char **err);

#ifdef __cplusplus
}
#endif

#endif /* GVX_H */
