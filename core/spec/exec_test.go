package spec

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestExecValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(*Exec)
		field string
		says  string
	}{
		{"no argv", func(e *Exec) { e.Argv = nil }, "argv", "give the command to run"},
		{"timeout", func(e *Exec) { e.Timeout = Seconds(-time.Second) }, "timeout", "-1s is negative"},
		{"umask too wide", func(e *Exec) { e.Umask = ptr(0o1000) }, "umask", "512 is not a file mode mask"},
		{"umask negative", func(e *Exec) { e.Umask = ptr(-1) }, "umask", "give 0 to 0o777"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := Exec{Argv: []string{"true"}}
			c.edit(&e)
			err := e.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v; want a *FieldError", err)
			}
			if fe.Field != c.field || !strings.HasPrefix(err.Error(), "exec spec: "+c.field+": ") || !strings.Contains(err.Error(), c.says) {
				t.Errorf("Validate() = %v (field %q); want exec spec's field %q saying %q", err, fe.Field, c.field, c.says)
			}
		})
	}
	for _, e := range []Exec{{Argv: []string{"true"}}, {Argv: []string{"true"}, Umask: ptr(0)}, {Argv: []string{"true"}, Umask: ptr(0o777)}} {
		if err := e.Validate(); err != nil {
			t.Errorf("%+v: Validate() = %v", e, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestExecUmaskJSON: the umask is a JSON integer, and unset is absent.
func TestExecUmaskJSON(t *testing.T) {
	var e Exec
	if err := json.Unmarshal([]byte(`{"argv":["true"],"umask":63}`), &e); err != nil || e.Umask == nil || *e.Umask != 0o077 {
		t.Errorf("decoded umask %v, %v; want 0o077", e.Umask, err)
	}
	if out, _ := json.Marshal(Exec{Argv: []string{"true"}}); strings.Contains(string(out), "umask") {
		t.Errorf("an unset umask is encoded: %s", out)
	}
}

// TestExecJSON pins the exec JSON that Python writes and the C ABI
// documents: the timeout in seconds, every field in snake case.
func TestExecJSON(t *testing.T) {
	const in = `{"argv":["sh","-c","id"],"env":["A=1"],"cwd":"/w","user":"1000:1000","timeout":1.5}`
	var e Exec
	if err := json.Unmarshal([]byte(in), &e); err != nil {
		t.Fatal(err)
	}
	want := Exec{Argv: []string{"sh", "-c", "id"}, Env: []string{"A=1"}, Cwd: "/w", User: "1000:1000", Timeout: Seconds(1500 * time.Millisecond)}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("decoded %+v; want %+v", e, want)
	}
	out, err := json.Marshal(want)
	if err != nil || string(out) != in {
		t.Errorf("encoded %s, %v; want %s", out, err, in)
	}
}

// TestExecStderrToStdoutJSON: stderr_to_stdout is a JSON boolean, unset is
// absent, and a value of another type is refused naming the key.
func TestExecStderrToStdoutJSON(t *testing.T) {
	var e Exec
	if err := json.Unmarshal([]byte(`{"argv":["true"],"stderr_to_stdout":true}`), &e); err != nil || !e.StderrToStdout {
		t.Errorf("decoded stderr_to_stdout %v, %v; want true", e.StderrToStdout, err)
	}
	if err := e.Validate(); err != nil {
		t.Errorf("%+v: Validate() = %v", e, err)
	}
	if out, _ := json.Marshal(Exec{Argv: []string{"true"}}); strings.Contains(string(out), "stderr_to_stdout") {
		t.Errorf("an unset stderr_to_stdout is encoded: %s", out)
	}
	if err := json.Unmarshal([]byte(`{"argv":["true"],"stderr_to_stdout":1}`), &Exec{}); err == nil || !strings.Contains(err.Error(), "stderr_to_stdout") {
		t.Errorf("stderr_to_stdout 1: %v; want an error naming the key", err)
	}
}
