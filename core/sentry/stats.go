package sentry

// Stats is a snapshot of a sandbox's resource use.
type Stats struct {
	// MemoryUsage is the memory the sandbox holds on the host, in bytes:
	// guest memory, tmpfs and the writable root layer.
	MemoryUsage uint64
	// MemoryLimit is Config.MemoryLimit (0: none).
	MemoryLimit uint64
	// OOMKills counts processes killed for exceeding MemoryLimit.
	OOMKills int64
	// Tasks is the number of guest tasks (threads); PidsLimit caps it
	// (0: no limit).
	Tasks     int
	PidsLimit int
}

// Stats returns the sandbox's current resource use.
func (s *Sandbox) Stats() (Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == stateClosed {
		return Stats{}, ErrClosed
	}
	st := Stats{MemoryLimit: s.cfg.MemoryLimit, PidsLimit: max(s.cfg.PidsLimit, 0), Tasks: s.k.TaskSet().Root.NumTasks()}
	if s.oom != nil {
		st.OOMKills = s.oom.kills.Load()
	}
	usage, err := s.k.MemoryFile().TotalUsage()
	if err != nil {
		return Stats{}, err
	}
	st.MemoryUsage = usage
	return st, nil
}

// oomKiller returns the sandbox's OOM killer, or nil.
func (s *Sandbox) oomKiller() *oomKiller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oom
}
