package hostlimits

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFullPidsCgroup finds a pids cgroup that is full in cgroup v1 and v2
// layouts, at the process's own cgroup or an ancestor, and none where every
// limit has room or is "max".
func TestFullPidsCgroup(t *testing.T) {
	for _, tc := range []struct {
		name       string
		procCgroup string
		files      map[string]string // under the cgroup root
		want       string            // relative to the root; "" for none
		max, cur   int
	}{{
		name:       "v1, own cgroup full",
		procCgroup: "8:pids:/pod/ctr\n4:memory:/pod/ctr\n",
		files:      map[string]string{"pids/pod/ctr/pids.max": "100\n", "pids/pod/ctr/pids.current": "99\n", "pids/pod/pids.max": "max\n", "pids/pod/pids.current": "99\n"},
		want:       "pids/pod/ctr", max: 100, cur: 99,
	}, {
		name:       "v1, an ancestor full",
		procCgroup: "3:cpu,pids:/pod/ctr\n",
		files:      map[string]string{"pids/pod/ctr/pids.max": "max\n", "pids/pod/ctr/pids.current": "40\n", "pids/pod/pids.max": "40\n", "pids/pod/pids.current": "40\n"},
		want:       "pids/pod", max: 40, cur: 40,
	}, {
		name:       "v2, own cgroup full",
		procCgroup: "0::/user.slice/job\n",
		files:      map[string]string{"user.slice/job/pids.max": "64", "user.slice/job/pids.current": "63"},
		want:       "user.slice/job", max: 64, cur: 63,
	}, {
		name:       "room left",
		procCgroup: "0::/job\n",
		files:      map[string]string{"job/pids.max": "1000", "job/pids.current": "200", "pids.max": "max", "pids.current": "200"},
	}, {
		name:       "no pids controller",
		procCgroup: "4:memory:/x\n",
		files:      map[string]string{"pids/x/pids.max": "1", "pids/x/pids.current": "1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "cgroup")
			for name, content := range tc.files {
				p := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			procCgroup := filepath.Join(dir, "proc-self-cgroup")
			if err := os.WriteFile(procCgroup, []byte(tc.procCgroup), 0o644); err != nil {
				t.Fatal(err)
			}
			cg, max, cur, ok := FullPidsCgroup(procCgroup, root)
			if tc.want == "" {
				if ok {
					t.Fatalf("found a full pids cgroup %s (%d/%d), want none", cg, cur, max)
				}
				return
			}
			if want := filepath.Join(root, tc.want); !ok || cg != want || max != tc.max || cur != tc.cur {
				t.Fatalf("fullPidsCgroup = %q %d %d %v, want %q %d %d", cg, max, cur, ok, want, tc.max, tc.cur)
			}
		})
	}
}
