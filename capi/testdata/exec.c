/*
 * Drives a real sandbox through gvx.h alone, proving the ABI without
 * Python: version, a sandbox, an exec with stdin and both outputs, a
 * streamed exec, files, a persistent shell through the process calls,
 * and the errors for bad input and closed handles,
 * and for a sandbox whose process was killed from outside.
 *
 * Environment: GVX_TEST_CONFIG (the sandbox's config_json).
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gvx.h"

static int failures;

#define CHECK(cond, ...)                                  \
	do {                                                  \
		if (!(cond)) {                                    \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                 \
			fputc('\n', stderr);                          \
			failures++;                                   \
		}                                                 \
	} while (0)

struct collected {
	char out[256];
	size_t len;
	int chunks;
};

static void on_output(void *userdata, int stream, const uint8_t *data, size_t len) {
	struct collected *c = userdata;
	if (stream == GVX_STDOUT && c->len + len < sizeof c->out) {
		memcpy(c->out + c->len, data, len);
		c->len += len;
	}
	c->chunks++;
}

/* rungv's pid, from the sandbox's info; 0 if it cannot be read. */
static long rungv_pid(uint64_t sb) {
	char *info = NULL, *err = NULL;
	if (gvx_sandbox_info(sb, &info, &err) != GVX_OK) {
		gvx_free(err);
		return 0;
	}
	const char *p = strstr(info, "\"pid\":");
	long pid = p != NULL ? strtol(p + strlen("\"pid\":"), NULL, 10) : 0;
	gvx_free(info);
	return pid;
}

/*
 * Reads the process's stdout until what was read so far contains needle,
 * sending ^C to the job between reads if interrupt is set. 1 if found.
 */
static int read_until(uint64_t proc, const char *needle, int interrupt) {
	char seen[4096];
	size_t len = 0;
	for (int tries = 0; tries < 600; tries++) {
		char *err = NULL;
		if (interrupt) {
			int st = gvx_process_signal(proc, SIGINT, GVX_SIGNAL_DESCENDANTS, &err);
			CHECK(st == GVX_OK, "^C to the job: %d %s", st, err ? err : "");
			gvx_free(err);
			err = NULL;
		}
		size_t n = 0;
		int st = gvx_process_read(proc, GVX_STDOUT, (uint8_t *)seen + len, sizeof seen - 1 - len, 100, 0, &n, &err);
		gvx_free(err);
		if (st == GVX_E_TIMEOUT) {
			continue;
		}
		if (st != GVX_OK || n == 0) {
			return 0;
		}
		len += n;
		seen[len] = 0;
		if (strstr(seen, needle) != NULL) {
			return 1;
		}
	}
	return 0;
}

int main(void) {
	char *err = NULL, *s = NULL;
	const char *config = getenv("GVX_TEST_CONFIG");
	if (config == NULL) {
		fprintf(stderr, "GVX_TEST_CONFIG is not set\n");
		return 2;
	}

	uint64_t sb = 0;
	int status = gvx_sandbox_new(config, &sb, &err);
	if (status != GVX_OK) {
		fprintf(stderr, "gvx_sandbox_new: %d %s\n", status, err);
		return 1;
	}
	CHECK(sb != 0, "handle 0");

	status = gvx_sandbox_info(sb, &s, &err);
	CHECK(status == GVX_OK && strstr(s, "\"pid\":") != NULL, "info: %d %s", status, s);
	gvx_free(s);

	char *result = NULL;
	uint8_t *out = NULL, *errb = NULL;
	size_t out_len = 0, err_len = 0;
	const char *input = "from stdin";
	status = gvx_sandbox_exec(sb, "{\"argv\": [\"sh\", \"-c\", \"cat; echo; echo oops >&2; exit 3\"]}",
	                          (const uint8_t *)input, strlen(input), &result, &out, &out_len, &errb, &err_len, &err);
	CHECK(status == GVX_OK, "exec: %d %s", status, err);
	if (status == GVX_OK) {
		CHECK(strstr(result, "\"exit_code\":3") != NULL, "result %s", result);
		CHECK(out_len == 11 && strcmp((char *)out, "from stdin\n") == 0, "stdout %zu %s", out_len, out);
		CHECK(strcmp((char *)errb, "oops\n") == 0, "stderr %s", errb);
		gvx_free(result);
		gvx_free(out);
		gvx_free(errb);
	}

	struct collected c = {0};
	status = gvx_sandbox_exec_stream(sb, "{\"argv\": [\"sh\", \"-c\", \"echo one; sleep 0.2; echo two\"]}", NULL, 0,
	                                 on_output, &c, &result, &err);
	CHECK(status == GVX_OK, "exec_stream: %d %s", status, err);
	if (status == GVX_OK) {
		CHECK(c.len == 8 && memcmp(c.out, "one\ntwo\n", 8) == 0 && c.chunks >= 2, "streamed %d chunks: %.*s",
		      c.chunks, (int)c.len, c.out);
		gvx_free(result);
	}

	const char *content = "written by C\n";
	status = gvx_sandbox_write_file(sb, "/tmp/c.txt", (const uint8_t *)content, strlen(content), 0600, &err);
	CHECK(status == GVX_OK, "write_file: %d %s", status, err);
	uint8_t *data = NULL;
	size_t len = 0;
	status = gvx_sandbox_read_file(sb, "/tmp/c.txt", &data, &len, &err);
	CHECK(status == GVX_OK && len == strlen(content) && memcmp(data, content, len) == 0, "read_file: %d", status);
	gvx_free(data);

	/* Owned by a user of the image, resolved in the sandbox; an unknown one is refused by name. */
	status = gvx_sandbox_write_file_as(sb, "/tmp/owned/c.txt", (const uint8_t *)content, strlen(content),
	                                   0640 | GVX_WRITE_MAKE_PARENTS, "nobody", &err);
	CHECK(status == GVX_OK, "write_file_as: %d %s", status, err);
	status = gvx_sandbox_stat(sb, "/tmp/owned/c.txt", &s, &err);
	CHECK(status == GVX_OK && strstr(s, "\"uid\":65534,\"gid\":65534") != NULL, "stat of an owned file: %d %s", status,
	      s);
	gvx_free(s);
	status = gvx_sandbox_stat(sb, "/tmp/owned", &s, &err);
	CHECK(status == GVX_OK && strstr(s, "\"uid\":65534,") != NULL, "stat of a directory made for it: %d %s", status, s);
	gvx_free(s);
	status = gvx_sandbox_write_file_as(sb, "/tmp/c.txt", (const uint8_t *)content, strlen(content), 0, "ghost", &err);
	CHECK(status == GVX_E_INVALID && err != NULL && strstr(err, "\"ghost\"") != NULL, "unknown owner: %d %s", status,
	      err ? err : "");
	gvx_free(err);
	err = NULL;

	status = gvx_sandbox_read_file(sb, "/no/such/file", &data, &len, &err);
	CHECK(status == GVX_E_NOT_FOUND && err != NULL, "missing file: %d", status);
	gvx_free(err);
	err = NULL;

	/* An exec's umask (63 = 0o077) is the mask of the files it creates; one out of range is refused by name. */
	status = gvx_sandbox_exec(sb, "{\"argv\": [\"sh\", \"-c\", \"umask; touch /tmp/u; stat -c %a /tmp/u\"], \"umask\": 63}",
	                          NULL, 0, &result, &out, &out_len, &errb, &err_len, &err);
	CHECK(status == GVX_OK, "exec with a umask: %d %s", status, err);
	if (status == GVX_OK) {
		CHECK(strcmp((char *)out, "0077\n600\n") == 0, "exec with umask 63: stdout %s stderr %s", out, errb);
		gvx_free(result);
		gvx_free(out);
		gvx_free(errb);
	}
	status = gvx_sandbox_exec(sb, "{\"argv\": [\"true\"], \"umask\": 512}", NULL, 0, &result, &out, &out_len, &errb,
	                          &err_len, &err);
	CHECK(status == GVX_E_INVALID && err != NULL && strstr(err, "umask: 512") != NULL, "umask 512: %d %s", status,
	      err ? err : "");
	gvx_free(err);
	err = NULL;

	/* stderr_to_stdout: the command's stderr arrives on stdout in the order written; stderr is empty. */
	status = gvx_sandbox_exec(sb, "{\"argv\": [\"sh\", \"-c\", \"echo a; echo b >&2; echo c\"], \"stderr_to_stdout\": true}",
	                          NULL, 0, &result, &out, &out_len, &errb, &err_len, &err);
	CHECK(status == GVX_OK, "exec with stderr_to_stdout: %d %s", status, err);
	if (status == GVX_OK) {
		CHECK(out_len == 6 && memcmp(out, "a\nb\nc\n", 6) == 0 && err_len == 0,
		      "exec with stderr_to_stdout: stdout %s stderr %s", out, errb);
		gvx_free(result);
		gvx_free(out);
		gvx_free(errb);
	}

	status = gvx_sandbox_exec(sb, "{\"argv\": [\"true\"], \"timeuot\": 1}", NULL, 0, &result, &out, &out_len, &errb,
	                          &err_len, &err);
	CHECK(status == GVX_E_INVALID && err != NULL && strstr(err, "timeuot") != NULL, "misspelt key: %d %s", status,
	      err ? err : "");
	gvx_free(err);
	err = NULL;

	/* A shell that keeps its state between the commands written to it and
	 * survives a ^C to the job it runs. */
	uint64_t proc = 0;
	status = gvx_process_start(sb, "{\"argv\": [\"/bin/sh\"], \"stderr_to_stdout\": true}", &proc, &err);
	CHECK(status == GVX_OK, "process start: %d %s", status, err ? err : "");
	const char *setup = "cd /tmp && X=kept && echo ready\n";
	status = gvx_process_write(proc, (const uint8_t *)setup, strlen(setup), &err);
	CHECK(status == GVX_OK && read_until(proc, "ready\n", 0), "the shell's first answer: %d", status);
	uint8_t byte;
	size_t got = 1;
	status = gvx_process_read(proc, GVX_STDOUT, &byte, 1, 10, 0, &got, &err);
	CHECK(status == GVX_E_TIMEOUT && got == 0, "a read with nothing to read: %d, %zu bytes", status, got);
	gvx_free(err);
	err = NULL;
	const char *job = "sleep 1000; echo rc=$?\n";
	status = gvx_process_write(proc, (const uint8_t *)job, strlen(job), &err);
	CHECK(status == GVX_OK && read_until(proc, "rc=130\n", 1), "the job after ^C: %d", status);
	const char *state = "echo $X $(pwd) >&2\n";
	status = gvx_process_write(proc, (const uint8_t *)state, strlen(state), &err);
	CHECK(status == GVX_OK && read_until(proc, "kept /tmp\n", 0), "the shell's state after ^C: %d", status);
	status = gvx_process_read(proc, 3, &byte, 1, 10, 0, &got, &err);
	CHECK(status == GVX_E_INVALID && err != NULL && strstr(err, "stream 3") != NULL, "stream 3: %d", status);
	gvx_free(err);
	err = NULL;
	status = gvx_process_close_stdin(proc, &err);
	CHECK(status == GVX_OK, "close stdin: %d", status);
	status = gvx_process_read(proc, GVX_STDOUT, &byte, 1, 60000, 0, &got, &err);
	CHECK(status == GVX_OK && got == 0, "the end of the output: %d, %zu bytes", status, got);
	status = gvx_process_wait(proc, 60000, 0, &result, &err);
	CHECK(status == GVX_OK && strstr(result, "\"exit_code\":0") != NULL, "process wait: %d %s", status,
	      status == GVX_OK ? result : err);
	if (status == GVX_OK) {
		gvx_free(result);
	}
	status = gvx_process_close(proc, &err);
	CHECK(status == GVX_OK, "process close: %d", status);
	status = gvx_process_close(proc, &err);
	CHECK(status == GVX_E_CLOSED, "second process close: %d", status);
	gvx_free(err);
	err = NULL;
	status = gvx_process_read(proc, GVX_STDOUT, &byte, 1, 10, 0, &got, &err);
	CHECK(status == GVX_E_CLOSED, "read after close: %d", status);
	gvx_free(err);
	err = NULL;

	status = gvx_sandbox_exec(sb, "{\"argv\": [\"sh\", \"-c\", \"echo $$ > /tmp/pid\"]}", NULL, 0, &result, &out,
	                          &out_len, &errb, &err_len, &err);
	CHECK(status == GVX_OK, "exec before reset: %d", status);
	gvx_free(result);
	gvx_free(out);
	gvx_free(errb);
	status = gvx_sandbox_reset(sb, &err);
	CHECK(status == GVX_OK, "reset: %d %s", status, err ? err : "");
	status = gvx_sandbox_read_file(sb, "/tmp/pid", &data, &len, &err);
	CHECK(status == GVX_E_NOT_FOUND, "a reset sandbox still has the old sandbox's file: %d", status);
	gvx_free(err);
	err = NULL;

	status = gvx_sandbox_close(sb, &err);
	CHECK(status == GVX_OK, "close: %d %s", status, err);
	status = gvx_sandbox_close(sb, &err);
	CHECK(status == GVX_E_CLOSED, "second close: %d", status);
	gvx_free(err);
	err = NULL;
	status = gvx_sandbox_exec(sb, "{\"argv\": [\"true\"]}", NULL, 0, &result, &out, &out_len, &errb, &err_len, &err);
	CHECK(status == GVX_E_CLOSED, "exec after close: %d", status);
	gvx_free(err);

	/* A sandbox whose rungv was killed: a reset still gives a fresh one, and
	 * closing one says it did not stop cleanly, once. */
	status = gvx_sandbox_new(config, &sb, &err);
	CHECK(status == GVX_OK, "second sandbox: %d %s", status, err ? err : "");
	long pid = rungv_pid(sb);
	CHECK(pid > 0 && kill((pid_t)pid, SIGKILL) == 0, "killing rungv %ld", pid);
	status = gvx_sandbox_reset(sb, &err);
	CHECK(status == GVX_OK, "reset of a killed sandbox: %d %s", status, err ? err : "");
	long fresh = rungv_pid(sb);
	CHECK(fresh > 0 && fresh != pid && kill((pid_t)fresh, SIGKILL) == 0, "killing the fresh rungv %ld", fresh);
	status = gvx_sandbox_close(sb, &err);
	CHECK(status == GVX_E_UNAVAILABLE && err != NULL && strstr(err, "did not stop cleanly") != NULL &&
	          strstr(err, "killed by SIGKILL") != NULL,
	      "close of a killed sandbox: %d %s", status, err ? err : "");
	gvx_free(err);
	err = NULL;
	status = gvx_sandbox_close(sb, &err);
	CHECK(status == GVX_E_CLOSED, "second close of a killed sandbox: %d", status);
	gvx_free(err);
	err = NULL;

	status = gvx_sandbox_new("{\"image\": \"\"}", &sb, &err);
	CHECK(status == GVX_E_INVALID && strstr(err, "image") != NULL, "empty image: %d", status);
	gvx_free(err);

	if (failures == 0) {
		printf("ok\n");
	}
	return failures == 0 ? 0 : 1;
}
