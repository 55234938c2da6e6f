package report

import (
	"encoding/json"
	"testing"
	"time"
)

// TestWireFormat pins the JSON the control protocol carries and libgvx
// passes on (gvx_sandbox_stats): the types moved here from core/control
// with their keys unchanged.
func TestWireFormat(t *testing.T) {
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, c := range []struct {
		v    any
		want string
	}{
		{SandboxInfo{ID: "a1", PID: 42, Image: "img", Hostname: "h", Platform: "systrap", Spinning: true, Rungv: "v1",
			Ports: []PublishedPort{{HostIP: "127.0.0.1", HostPort: 8080, GuestPort: 80, Protocol: "tcp"}, {HostPath: "/s", GuestPort: 2375, Protocol: "tcp"}}},
			`{"id":"a1","pid":42,"image":"img","hostname":"h","platform":"systrap","spinning":true,"rungv":"v1","ports":[{"host_ip":"127.0.0.1","host_port":8080,"guest_port":80,"protocol":"tcp"},{"host_path":"/s","guest_port":2375,"protocol":"tcp"}]}`},
		{SandboxInfo{PID: 1}, `{"pid":1}`},
		{FileInfo{Path: "/l", Mode: 0o120777, Size: 3, UID: 1, GID: 2, Mtime: mtime, Target: "x"},
			`{"path":"/l","mode":41471,"size":3,"uid":1,"gid":2,"mtime":"2024-05-06T07:08:09Z","target":"x"}`},
		{FileInfo{Path: "/f", Mtime: mtime}, `{"path":"/f","mode":0,"size":0,"uid":0,"gid":0,"mtime":"2024-05-06T07:08:09Z"}`},
		{Stats{MemoryUsage: 1, MemoryLimit: 2, OOMKills: 3, Tasks: 4, PidsLimit: 5}, `{"memory_usage":1,"memory_limit":2,"oom_kills":3,"tasks":4,"pids_limit":5}`},
		{Stats{}, `{"memory_usage":0,"oom_kills":0,"tasks":0}`},
		{CopyResult{Entries: 1, Bytes: 2}, `{"entries":1,"bytes":2}`},
		{CheckpointResult{Bytes: 9, Hook: "saved"}, `{"bytes":9,"hook":"saved"}`},
		{CheckpointResult{}, `{"bytes":0}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%T %+v: %s %v\nwant %s", c.v, c.v, b, err, c.want)
		}
	}
	if !(FileInfo{Mode: 0o40755}).IsDir() || (FileInfo{Mode: 0o100644}).IsDir() {
		t.Error("IsDir")
	}
}
