// Package filehash gives tests the SHA-256 of a host file, to prove that
// something (a golden volume, a cached image) did or did not change.
package filehash

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"testing"
)

// SHA256 returns the hex SHA-256 of the file at path, failing t if it
// cannot be read.
func SHA256(t testing.TB, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
