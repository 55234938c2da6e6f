package testimage

import (
	"testing"
)

// TestImageIsDeterministic: building the image twice gives the same
// manifest and config digests, so caches keyed by them stay valid.
func TestImageIsDeterministic(t *testing.T) {
	specs := Layers([]byte("busybox stand-in"))
	digests := make([]string, 2)
	for i := range digests {
		img, err := Image(specs)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		c, _ := img.ConfigName()
		digests[i] = d.String() + " " + c.String()
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds differ: %v", digests)
	}
}
