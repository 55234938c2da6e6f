// Package report defines what a sandbox reports: its identity and
// published ports (SandboxInfo), a file's description (FileInfo), its
// resource use (Stats), and what a copy or a checkpoint moved. The control
// protocol carries these types as they are and the Go SDK returns them, so
// that there is one definition of each, with its JSON, and the SDK's
// callers need not import the protocol. A package of its own, not
// core/spec: a spec says what a sandbox is to be, and is the caller's
// input; these are what a running sandbox answers.
package report

import (
	"syscall"
	"time"
)

// SandboxInfo describes a sandbox: what its control connection tells a
// client first.
type SandboxInfo struct {
	ID       string `json:"id,omitempty"`
	PID      int    `json:"pid"` // the rungv process
	Image    string `json:"image,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	Platform string `json:"platform,omitempty"`
	Spinning bool   `json:"spinning,omitempty"` // systrap's threads spin while they wait (rungv --spin)
	Rungv    string `json:"rungv,omitempty"`    // rungv's version
	// Ports are the published ports as bound: a host port the host chose
	// (published as IP::GUESTPORT) is filled in.
	Ports []PublishedPort `json:"ports,omitempty"`
}

// PublishedPort is a guest port reachable from the host.
type PublishedPort struct {
	HostPath  string `json:"host_path,omitempty"` // a unix socket on the host
	HostIP    string `json:"host_ip,omitempty"`
	HostPort  uint16 `json:"host_port,omitempty"`
	GuestPort uint16 `json:"guest_port"`
	Protocol  string `json:"protocol"` // "tcp" or "udp"
}

// FileInfo describes a file in the sandbox.
type FileInfo struct {
	Path  string    `json:"path"`
	Mode  uint32    `json:"mode"` // type and permission bits, as stat(2)
	Size  int64     `json:"size"`
	UID   uint32    `json:"uid"`
	GID   uint32    `json:"gid"`
	Mtime time.Time `json:"mtime"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
}

// IsDir reports whether the file is a directory.
func (fi FileInfo) IsDir() bool { return fi.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// Stats is the sandbox's resource use.
type Stats struct {
	// MemoryUsage is the memory the sandbox holds on the host, in bytes.
	MemoryUsage uint64 `json:"memory_usage"`
	MemoryLimit uint64 `json:"memory_limit,omitempty"`
	// OOMKills counts guest processes killed for exceeding MemoryLimit.
	OOMKills int64 `json:"oom_kills"`
	// Tasks is the number of guest tasks (threads).
	Tasks     int `json:"tasks"`
	PidsLimit int `json:"pids_limit,omitempty"`
}

// CopyResult counts what CopyIn or CopyOut moved.
type CopyResult struct {
	// Entries counts files, directories, links and nodes.
	Entries int64 `json:"entries"`
	// Bytes counts the regular files' content.
	Bytes int64 `json:"bytes"`
}

// CheckpointResult describes a written snapshot.
type CheckpointResult struct {
	// Bytes is the snapshot's size.
	Bytes int64 `json:"bytes"`
	// Hook is what the image's snapshot hook saved for its restore
	// (empty if the image has none); it travels inside the snapshot.
	Hook string `json:"hook,omitempty"`
}
