package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/control"
	"z.gfire.dev/gvx/core/spec"
)

// TestExecUserAddedAfterBoot: a user and a group the guest adds to its
// /etc/passwd and /etc/group after boot (as useradd does) can be named by
// a later exec and a later file's owner, as with docker exec.
func TestExecUserAddedAfterBoot(t *testing.T) {
	img := testImage(t)
	sock := filepath.Join(t.TempDir(), "box.sock")
	cmd, _, c := startControlled(t, sock, img)
	defer cmd.Process.Kill()
	defer c.Close()
	ctx := context.Background()
	exec := func(user, script string) (string, control.ExecResult, error) {
		var out bytes.Buffer
		res, err := c.Exec(ctx, control.ExecRequest{Exec: spec.Exec{Argv: []string{"sh", "-c", script}, User: user}}, control.ExecIO{Stdout: &out, Stderr: &out})
		return out.String(), res, err
	}

	if _, _, err := exec("late", "true"); err == nil || !strings.Contains(err.Error(), `user "late" is not in`) {
		t.Fatalf("exec as a user that does not exist yet: %v; want an error naming the user", err)
	}
	add := `echo 'late:x:4321:4322:Late:/home/late:/bin/sh' >> /etc/passwd && echo 'lategrp:x:4323:' >> /etc/group`
	if out, res, err := exec("", add); err != nil || res.ExitCode != 0 {
		t.Fatalf("adding the user: %+v %v %q", res, err, out)
	}
	for user, want := range map[string]string{
		"late":         "4321 4322",
		"late:lategrp": "4321 4323",
		"4321":         "4321 4322", // the gid from the new entry
	} {
		out, res, err := exec(user, `echo $(id -u) $(id -g)`)
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(out) != want {
			t.Errorf("exec as %q: %+v %v %q; want %q", user, res, err, out, want)
		}
	}
	fi, err := c.WriteFile(ctx, control.WriteFileRequest{Path: "/tmp/late-owned", Owner: "late:lategrp"}, strings.NewReader("x"))
	if err != nil || fi.UID != 4321 || fi.GID != 4323 {
		t.Errorf("a file owned by late:lategrp: %+v %v; want uid 4321, gid 4323", fi, err)
	}

	// The guest owns the files: one too big to read is refused, not read
	// into rungv's memory.
	if out, res, err := exec("", "dd if=/dev/null of=/etc/group bs=1M seek=17 count=0 2>&1"); err != nil || res.ExitCode != 0 {
		t.Fatalf("growing /etc/group: %+v %v %q", res, err, out)
	}
	if _, _, err := exec("late", "true"); err == nil || !strings.Contains(err.Error(), "/etc/group is over 16 MiB") {
		t.Errorf("exec with a 17 MiB /etc/group: %v; want an error saying it is too big", err)
	}
}
