package coopr

import (
	"os"
	"sort"
	"strings"
	"time"
)

// Status is what the console shows of the Coopr link.
type Status struct {
	Server     string `json:"server"`
	ID         string `json:"provisionerId"`
	API        string `json:"api"`
	Capacity   int    `json:"capacity"`
	Registered bool   `json:"registered"`
	// RegError says why the last registration or take was refused.
	RegError string         `json:"registrationError,omitempty"`
	Tenants  []TenantStatus `json:"tenants"`
	// Pending are the results kept on disk until the server takes them
	// (a finish that failed, or one from before a restart).
	Pending []PendingFinish `json:"pending"`
}

// TenantStatus is one tenant the server assigned.
type TenantStatus struct {
	ID      string `json:"id"`
	Workers int    `json:"workers"`
	// Slots are the take/finish loops running (Workers once resized).
	Slots []string `json:"slots"`
	// SyncError is the last resource sync's failure.
	SyncError string `json:"syncError,omitempty"`
}

// PendingFinish is a result waiting on disk for its finish.
type PendingFinish struct {
	TaskID string    `json:"taskId"`
	Since  time.Time `json:"since"`
}

// Status reports the registration, the tenants and their worker slots,
// and the results still to deliver.
func (p *Provisioner) Status() Status {
	p.mu.Lock()
	st := Status{Server: p.cfg.ServerURL, ID: p.cfg.ID, API: p.apiAddr, Capacity: p.cfg.Capacity,
		Registered: p.registered, RegError: p.regErr, Tenants: []TenantStatus{}, Pending: []PendingFinish{}}
	tenants := make([]*tenant, 0, len(p.tenants))
	for _, t := range p.tenants {
		tenants = append(tenants, t)
	}
	for _, t := range tenants {
		ts := TenantStatus{ID: t.id, Workers: t.workers, Slots: []string{}}
		for _, s := range t.slots {
			ts.Slots = append(ts.Slots, s.workerID)
		}
		st.Tenants = append(st.Tenants, ts)
	}
	p.mu.Unlock()
	for i, t := range tenants {
		t.syncMu.Lock()
		st.Tenants[i].SyncError = t.syncErr
		t.syncMu.Unlock()
	}
	sort.Slice(st.Tenants, func(i, j int) bool { return st.Tenants[i].ID < st.Tenants[j].ID })
	if dir := p.pendingDir(); dir != "" {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok {
				continue
			}
			pf := PendingFinish{TaskID: name}
			if info, err := e.Info(); err == nil {
				pf.Since = info.ModTime()
			}
			st.Pending = append(st.Pending, pf)
		}
	}
	return st
}
