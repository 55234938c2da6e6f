package main

import (
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
		spec, err := resolveCommand(cfg, c.entrypoint, c.args, nil, nil, "", "")
		if err != nil || !reflect.DeepEqual(spec.Argv, c.want) {
			t.Errorf("%s: argv %q, %v; want %q", c.name, spec.Argv, err, c.want)
		}
	}
	t.Setenv("FROM_HOST", "h")
	envFile := filepath.Join(t.TempDir(), "env")
	os.WriteFile(envFile, []byte("# comment\n\nB=file\nA=file\nFROM_HOST\nUNSET_ON_HOST\n"), 0o644)
	spec, err := resolveCommand(cfg, nil, nil, []string{"A=flag", "C"}, []string{envFile}, "/w", "1:2")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "A=flag", "B=file", "FROM_HOST=h"}; !reflect.DeepEqual(spec.Env, want) {
		t.Errorf("env %q, want %q", spec.Env, want)
	}
	if spec.Cwd != "/w" || spec.User != "1:2" {
		t.Errorf("cwd/user: %+v", spec)
	}
	if spec, _ = resolveCommand(cfg, nil, nil, nil, nil, "", ""); spec.Cwd != "/app" || spec.User != "app" {
		t.Errorf("image cwd/user not used: %+v", spec)
	}
	if _, err := resolveCommand(image.Config{}, nil, nil, nil, nil, "", ""); err == nil || !strings.Contains(err.Error(), "no command") {
		t.Errorf("no command: %v", err)
	}
	if _, err := resolveCommand(cfg, nil, nil, nil, nil, "rel", ""); err == nil {
		t.Error("relative workdir accepted")
	}
	os.WriteFile(envFile, []byte("BAD NAME=1\n"), 0o644)
	if _, err := resolveCommand(cfg, nil, nil, nil, []string{envFile}, "", ""); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Errorf("bad env file: %v", err)
	}
}

func TestLookupUser(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:App:/home/app:/bin/sh\n")
	group := []byte("root:x:0:\nstaff:x:50:\n")
	cases := []struct {
		spec string
		want guestUser
		err  string
	}{
		{"", guestUser{0, 0, "/root"}, ""},
		{"app", guestUser{1000, 1001, "/home/app"}, ""},
		{"1000", guestUser{1000, 1001, "/home/app"}, ""},
		{"4242", guestUser{4242, 0, "/"}, ""},
		{"app:staff", guestUser{1000, 50, "/home/app"}, ""},
		{"65534:65534", guestUser{65534, 65534, "/"}, ""},
		{"nobody", guestUser{}, "not in the image's /etc/passwd"},
		{"app:wheel", guestUser{}, "not in the image's /etc/group"},
	}
	for _, c := range cases {
		got, err := lookupUser(c.spec, passwd, group)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want error %q", c.spec, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q: %+v %v, want %+v", c.spec, got, err, c.want)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]uint64{"": 0, "1048576": 1 << 20, "512m": 512 << 20, "2g": 2 << 30, "2G": 2 << 30, "64kb": 64 << 10, "1.5g": 3 << 29} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"lots", "-1m", "1x"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("parseBytes(%q) accepted", bad)
		}
	}
}
