package gvx

import "z.gfire.dev/gvx/core/report"

// What a sandbox reports, as core/report defines it once for the control
// protocol and the SDK alike.
type (
	// SandboxInfo describes a sandbox (Sandbox.Info).
	SandboxInfo = report.SandboxInfo
	// PublishedPort is a guest port reachable from the host, as bound.
	PublishedPort = report.PublishedPort
	// FileInfo describes a file in the sandbox (Sandbox.Stat).
	FileInfo = report.FileInfo
	// Stats is the sandbox's resource use (Sandbox.Stats).
	Stats = report.Stats
	// CopyResult counts what CopyIn, CopyOut, UploadDir or DownloadDir
	// moved.
	CopyResult = report.CopyResult
	// CheckpointResult describes a written snapshot (Sandbox.Checkpoint).
	CheckpointResult = report.CheckpointResult
)
