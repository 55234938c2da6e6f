/* Links against libgvx through gvx.h alone, proving the ABI without Python. */
#include <stdio.h>
#include <string.h>

#include "gvx.h"

int main(void) {
	char *version = NULL, *err = NULL;
	int status = gvx_version(&version, &err);
	if (status != GVX_OK) {
		fprintf(stderr, "gvx_version: %d %s\n", status, err ? err : "");
		return 1;
	}
	printf("%s\n", version);
	gvx_free(version);

	status = gvx_version(NULL, &err);
	if (status != GVX_E_INVALID || err == NULL || strstr(err, "must not be NULL") == NULL) {
		fprintf(stderr, "NULL argument: status %d, err %s\n", status, err ? err : "(null)");
		return 1;
	}
	gvx_free(err);
	return 0;
}
