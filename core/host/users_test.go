package host

import (
	"strings"
	"testing"
)

func TestLookupUser(t *testing.T) {
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:App:/home/app:/bin/sh\n")
	group := []byte("root:x:0:\nstaff:x:50:\n")
	cases := []struct {
		spec string
		want User
		err  string
	}{
		{"", User{0, 0, "/root"}, ""},
		{"app", User{1000, 1001, "/home/app"}, ""},
		{"1000", User{1000, 1001, "/home/app"}, ""},
		{"4242", User{4242, 0, "/"}, ""},
		{"app:staff", User{1000, 50, "/home/app"}, ""},
		{"65534:65534", User{65534, 65534, "/"}, ""},
		{"nobody", User{}, "not in the image's /etc/passwd"},
		{"app:wheel", User{}, "not in the image's /etc/group"},
		{"a:b:c", User{}, "more than one ':'"},
		{"2147483648", User{}, "must be in range 0-2147483647"},
	}
	for _, c := range cases {
		got, err := LookupUser(c.spec, passwd, group)
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
