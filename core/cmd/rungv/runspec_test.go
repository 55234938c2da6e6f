package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"z.gfire.dev/gvx/core/image"
)

func TestResolveCommand(t *testing.T) {
	cfg := image.Config{Entrypoint: []string{"/entry"}, Cmd: []string{"serve", "--port=1"}, Env: []string{"PATH=/bin", "A=image"}, WorkingDir: "/app", User: "app"}
	str := func(s string) *string { return &s }
	cases := []struct {
		name       string
		entrypoint *string
		args       []string
		want       []string
	}{
		{"image defaults", nil, nil, []string{"/entry", "serve", "--port=1"}},
		{"args replace Cmd", nil, []string{"check"}, []string{"/entry", "check"}},
		{"--entrypoint drops Cmd", str("/bin/sh"), nil, []string{"/bin/sh"}},
		{"--entrypoint with args", str("/bin/sh"), []string{"-c", "true"}, []string{"/bin/sh", "-c", "true"}},
		{"empty --entrypoint", str(""), []string{"ls"}, []string{"ls"}},
	}
	for _, c := range cases {
		spec, err := resolveCommand(cfg, c.entrypoint, c.args, processDefaults{})
		if err != nil || !reflect.DeepEqual(spec.Argv, c.want) {
			t.Errorf("%s: argv %q, %v; want %q", c.name, spec.Argv, err, c.want)
		}
	}
	t.Setenv("FROM_HOST", "h")
	envFile := filepath.Join(t.TempDir(), "env")
	os.WriteFile(envFile, []byte("# comment\n\nB=file\nA=file\nFROM_HOST\nUNSET_ON_HOST\n"), 0o644)
	f := &runFlags{env: []string{"A=flag", "C"}, envFiles: []string{envFile}, workdir: "/w", user: "1:2"}
	d, err := f.processFlags()
	if err != nil {
		t.Fatal(err)
	}
	spec, err := resolveCommand(cfg, nil, nil, d)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "A=flag", "B=file", "FROM_HOST=h"}; !reflect.DeepEqual(spec.Env, want) {
		t.Errorf("env %q, want %q", spec.Env, want)
	}
	if spec.Cwd != "/w" || spec.User != "1:2" {
		t.Errorf("cwd/user: %+v", spec)
	}
	if spec, _ = resolveCommand(cfg, nil, nil, processDefaults{}); spec.Cwd != "/app" || spec.User != "app" {
		t.Errorf("image cwd/user not used: %+v", spec)
	}
	// Without a command, the defaults execs take are still resolved.
	spec, err = resolveCommand(image.Config{Env: []string{"A=1"}, WorkingDir: "/app"}, nil, nil, d)
	if !errors.Is(err, errNoCommand) || spec.Cwd != "/w" || len(spec.Env) != 3 || spec.Env[0] != "A=flag" {
		t.Errorf("no command: %+v, %v; want errNoCommand and the defaults", spec, err)
	}
	if _, err := resolveCommand(image.Config{Cmd: []string{"x"}, WorkingDir: "rel"}, nil, nil, processDefaults{}); err == nil || !strings.Contains(err.Error(), "--workdir") {
		t.Errorf("relative image WorkingDir: %v", err)
	}
}

// TestProcessFlags checks that each bad process flag is refused with the
// flag named and what to give.
func TestProcessFlags(t *testing.T) {
	dir := t.TempDir()
	badName := filepath.Join(dir, "bad-name")
	os.WriteFile(badName, []byte("BAD NAME=1\n"), 0o644)
	noName := filepath.Join(dir, "no-name")
	os.WriteFile(noName, []byte("A=1\n=2\n"), 0o644)
	cases := []struct {
		f    runFlags
		want string
	}{
		{runFlags{env: []string{"=x"}}, `--env "=x": invalid environment variable: it has no name; write NAME=VALUE`},
		{runFlags{env: []string{""}}, `--env "": invalid environment variable`},
		{runFlags{env: []string{"A B=1"}}, `contains whitespace`},
		{runFlags{envFiles: []string{""}}, `--env-file "": give the path`},
		{runFlags{envFiles: []string{filepath.Join(dir, "missing")}}, `the file does not exist; give a file`},
		{runFlags{envFiles: []string{dir}}, `is a directory; only a regular file`},
		{runFlags{envFiles: []string{badName}}, badName + `:1: invalid environment variable: the name "BAD NAME" contains whitespace`},
		{runFlags{envFiles: []string{noName}}, noName + `:2: invalid environment variable: it has no name`},
		{runFlags{workdir: "rel/dir"}, `--workdir "rel/dir": the working directory is invalid, it needs to be an absolute path; give one such as --workdir /app`},
		{runFlags{workdir: "/" + strings.Repeat("w", 5000)}, `more than the 4095 Linux takes (PATH_MAX)`},
		{runFlags{workdir: "/a/" + strings.Repeat("w", 256)}, `a name of 256 bytes, more than the 255 Linux takes (NAME_MAX)`},
		{runFlags{user: "::"}, `--user: user "::" has no name or uid; give name|uid[:group|gid]`},
		{runFlags{user: "a:"}, `has an empty group`},
		{runFlags{user: "a:b:c"}, `--user: user "a:b:c" has more than one ':'`},
		{runFlags{user: "4294967296"}, `--user: user "4294967296": uids and gids must be in range 0-2147483647`},
		{runFlags{user: "0:99999999999"}, `uids and gids must be in range`},
	}
	for _, c := range cases {
		_, err := c.f.processFlags()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", c.f, err, c.want)
		}
	}
	for _, good := range []runFlags{{user: "nobody"}, {user: "1000:1000"}, {user: "app:staff"}, {workdir: "/a/b"}, {env: []string{"A=", "A=b=c", "UNSET_ON_HOST"}}} {
		if _, err := good.processFlags(); err != nil {
			t.Errorf("%+v: %v", good, err)
		}
	}
}

// TestSizeGrammar reads sizes as core/testdata/sizes.json says, the cases
// Python's parse_size is held to as well.
func TestSizeGrammar(t *testing.T) {
	raw, err := os.ReadFile("../../testdata/sizes.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases struct {
		Valid   [][2]json.RawMessage `json:"valid"`
		Invalid [][2]string          `json:"invalid"`
	}
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatalf("sizes.json: %v", err)
	}
	if len(cases.Valid) == 0 || len(cases.Invalid) == 0 {
		t.Fatal("sizes.json holds no cases")
	}
	for _, c := range cases.Valid {
		var in string
		var want uint64
		if err := json.Unmarshal(c[0], &in); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(c[1], &want); err != nil {
			t.Fatal(err)
		}
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, c := range cases.Invalid {
		if got, err := parseBytes(c[0]); err == nil || !strings.Contains(err.Error(), c[1]) {
			t.Errorf("parseBytes(%q) = %d, %v; want an error saying %q", c[0], got, err, c[1])
		}
	}
	if got, err := parseBytes(""); err != nil || got != 0 {
		t.Errorf(`parseBytes("") = %d, %v; want 0 (unset)`, got, err)
	}
}
