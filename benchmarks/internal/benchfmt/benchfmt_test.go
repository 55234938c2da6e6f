package benchfmt

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := Percentile(ds, c.p); got != c.want {
			t.Errorf("p%d of 1..10 = %v, want %v", c.p, got, c.want)
		}
	}
	if ds[0] != 5 {
		t.Error("Percentile sorted its argument")
	}
	if Percentile(nil, 50) != 0 {
		t.Error("p50 of nothing is not 0")
	}
}
