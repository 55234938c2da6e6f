package gvx

import (
	"bytes"
	"strings"
	"testing"
)

func TestCaptureBuffer(t *testing.T) {
	var all bytes.Buffer
	c := &captureBuffer{limit: 10}
	for _, chunk := range []string{"abc", "defgh", "ijklmnop", "qrstuvwxyz"} {
		c.Write([]byte(chunk))
		all.WriteString(chunk)
	}
	got := string(c.Bytes())
	if !strings.HasPrefix(got, "abcde") || !strings.HasSuffix(got, "vwxyz") || !strings.Contains(got, "16 bytes of output left out") || !c.Truncated() {
		t.Fatalf("head and tail of %q: got %q", all.String(), got)
	}
	small := &captureBuffer{limit: 100}
	small.Write([]byte("short"))
	if string(small.Bytes()) != "short" || small.Truncated() {
		t.Fatalf("under the limit: %q", small.Bytes())
	}
	unbounded := &captureBuffer{}
	unbounded.Write(bytes.Repeat([]byte("x"), 1<<20))
	if len(unbounded.Bytes()) != 1<<20 {
		t.Fatal("limit 0 must keep everything")
	}
}
