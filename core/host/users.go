package host

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"z.gfire.dev/gvx/core/sentry"
)

// User is a user resolved against the guest's /etc/passwd and /etc/group.
type User struct {
	UID, GID uint32
	Home     string
}

// ResolveUser resolves spec as LookupUser does, against the sandbox's
// /etc/passwd and /etc/group as they are now: a user the guest added
// after boot (useradd) counts, as with docker exec.
func ResolveUser(ctx context.Context, sb *sentry.Sandbox, spec string) (User, error) {
	passwd, err := readUserFile(ctx, sb, "/etc/passwd")
	if err != nil {
		return User{}, err
	}
	group, err := readUserFile(ctx, sb, "/etc/group")
	if err != nil {
		return User{}, err
	}
	return LookupUser(spec, passwd, group)
}

// maxUserFile bounds what ResolveUser reads of /etc/passwd and /etc/group:
// the guest owns them, and the host's memory is not the sandbox's.
const maxUserFile = 16 << 20

// readUserFile reads the guest's /etc/passwd or /etc/group. A file the
// guest lacks, or that is not a regular file, counts as empty.
func readUserFile(ctx context.Context, sb *sentry.Sandbox, name string) ([]byte, error) {
	f, err := sb.Open(ctx, name)
	if err != nil {
		return nil, nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxUserFile+1))
	if err != nil {
		return nil, nil
	}
	if len(b) > maxUserFile {
		return nil, fmt.Errorf("the sandbox's %s is over %d MiB, more than is read to resolve a user; shrink it", name, maxUserFile>>20)
	}
	return b, nil
}

// userSpec is a parsed "name|uid[:group|gid]", as docker run -u takes it.
type userSpec struct {
	user, group string // as given; group is "" without one
	uid, gid    uint32 // for a numeric user or group
	numericUser bool
	numericGID  bool
}

// maxID bounds numeric uids and gids, as docker's (runc's) does.
const maxID = math.MaxInt32

// CheckUser checks a user as -u, an exec or an owner gives it,
// "name|uid[:group|gid]", without resolving it.
func CheckUser(spec string) error {
	_, err := parseUserSpec(spec)
	return err
}

// parseUserSpec parses a user as -u, an exec or an owner gives it. A part
// of digits only is a uid or gid.
func parseUserSpec(spec string) (userSpec, error) {
	var u userSpec
	const want = "give name|uid[:group|gid], e.g. 1000:1000 or nobody"
	user, group, hasGroup := strings.Cut(spec, ":")
	switch {
	case user == "":
		return u, fmt.Errorf("user %.64q has no name or uid; %s", spec, want)
	case hasGroup && group == "":
		return u, fmt.Errorf("user %.64q has an empty group after ':'; %s", spec, want)
	case strings.Contains(group, ":"):
		return u, fmt.Errorf("user %.64q has more than one ':'; %s", spec, want)
	}
	u.user, u.group = user, group
	var err error
	if u.uid, u.numericUser, err = parseID(user); err != nil {
		return u, fmt.Errorf("user %.64q: %w", spec, err)
	}
	if hasGroup {
		if u.gid, u.numericGID, err = parseID(group); err != nil {
			return u, fmt.Errorf("user %.64q: %w", spec, err)
		}
	}
	return u, nil
}

// parseID parses a uid or gid, reporting false for a name.
func parseID(s string) (uint32, bool, error) {
	if strings.Trim(s, "0123456789") != "" {
		return 0, false, nil
	}
	id, err := strconv.ParseUint(s, 10, 32)
	if err != nil || id > maxID {
		// As docker run words it.
		return 0, false, fmt.Errorf("uids and gids must be in range 0-%d; give one in that range, or a name", maxID)
	}
	return uint32(id), true, nil
}

// LookupUser resolves "uid[:gid]" or "name[:group]" (either part numeric or
// a name) against passwd and group file contents, which may be empty.
func LookupUser(spec string, passwd, group []byte) (User, error) {
	if spec == "" {
		spec = "0"
	}
	us, err := parseUserSpec(spec)
	if err != nil {
		return User{}, err
	}
	u := User{UID: us.uid, Home: "/"}
	entries := parseColonFile(passwd, 7)
	if us.numericUser {
		// A numeric user without a passwd entry gets gid 0, as in docker.
		for _, f := range entries {
			if f[2] == us.user {
				gid, _ := strconv.ParseUint(f[3], 10, 32)
				u.GID, u.Home = uint32(gid), f[5]
				break
			}
		}
	} else {
		found := false
		for _, f := range entries {
			if f[0] == us.user {
				uid, err1 := strconv.ParseUint(f[2], 10, 32)
				gid, err2 := strconv.ParseUint(f[3], 10, 32)
				if err1 != nil || err2 != nil {
					return User{}, fmt.Errorf("user %.64q: malformed /etc/passwd entry in the image; fix the image's /etc/passwd, or give a numeric uid[:gid]", us.user)
				}
				u.UID, u.GID, u.Home = uint32(uid), uint32(gid), f[5]
				found = true
				break
			}
		}
		if !found {
			return User{}, fmt.Errorf("user %.64q is not in the image's /etc/passwd; use a numeric uid[:gid] or a user the image has", us.user)
		}
	}
	switch {
	case us.numericGID:
		u.GID = us.gid
	case us.group != "":
		found := false
		for _, f := range parseColonFile(group, 4) {
			if f[0] == us.group {
				gid, err := strconv.ParseUint(f[2], 10, 32)
				if err != nil {
					return User{}, fmt.Errorf("group %.64q: malformed /etc/group entry in the image; fix the image's /etc/group, or give a numeric gid", us.group)
				}
				u.GID, found = uint32(gid), true
				break
			}
		}
		if !found {
			return User{}, fmt.Errorf("group %.64q is not in the image's /etc/group; use a numeric gid", us.group)
		}
	}
	if u.Home == "" {
		u.Home = "/"
	}
	return u, nil
}

// parseColonFile splits passwd/group-style lines into at least n fields.
func parseColonFile(b []byte, n int) [][]string {
	var out [][]string
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < n {
			continue
		}
		out = append(out, f)
	}
	return out
}
