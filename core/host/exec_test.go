package host

import (
	"slices"
	"testing"
)

func TestMergeEnv(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/root", "A=1"}
	got := MergeEnv(base, []string{"A=2", "B=3", "PATH=/usr/bin:/bin"})
	if want := []string{"PATH=/usr/bin:/bin", "HOME=/root", "A=2", "B=3"}; !slices.Equal(got, want) {
		t.Errorf("MergeEnv = %q, want %q", got, want)
	}
	if base[2] != "A=1" {
		t.Errorf("MergeEnv changed its base: %q", base)
	}
}

func TestWithHome(t *testing.T) {
	if got := WithHome([]string{"A=1"}, "/home/app"); !slices.Equal(got, []string{"A=1", "HOME=/home/app"}) {
		t.Errorf("without HOME: %q", got)
	}
	if got := WithHome([]string{"HOME=/set"}, "/home/app"); !slices.Equal(got, []string{"HOME=/set"}) {
		t.Errorf("HOME given: %q; the environment's wins", got)
	}
}
