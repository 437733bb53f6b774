package worker

import (
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Info is one live worker process, for the console's overview.
type Info struct {
	PID int `json:"pid"`
	// Type is the plugin type of the run in flight, or of the last one.
	Type string `json:"type"`
	// TaskID is the task running now; "" while idle.
	TaskID string `json:"taskId,omitempty"`
	// IdleSince is when it went idle (zero while busy).
	IdleSince time.Time `json:"idleSince,omitzero"`
	// Budget is the memory budget its OS limit was set for, in bytes.
	Budget int64 `json:"budget"`
	// RSS is its resident memory in bytes, read from /proc (0 when not
	// readable).
	RSS int64 `json:"rss"`
}

// Workers lists the live worker processes, busy ones first, with their
// resident memory.
func (s *Supervisor) Workers() []Info {
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.live))
	for w := range s.live {
		procs = append(procs, w)
	}
	s.mu.Unlock()
	out := make([]Info, 0, len(procs))
	for _, w := range procs {
		w.mu.Lock()
		in := Info{PID: w.pid, Type: w.spec.Name, TaskID: w.taskID, Budget: w.budget}
		w.mu.Unlock()
		s.mu.Lock()
		if in.TaskID == "" {
			in.IdleSince = w.idleSince
		}
		s.mu.Unlock()
		in.RSS = rssOf(in.PID)
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].TaskID == "") != (out[j].TaskID == "") {
			return out[i].TaskID != ""
		}
		return out[i].PID < out[j].PID
	})
	return out
}

// rssOf reads a process's resident set size from /proc/<pid>/statm.
func rssOf(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
