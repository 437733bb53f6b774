package apply

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// RefreshOptions tune Refresh.
type RefreshOptions struct {
	// Parallelism caps the tasks running at once (default 16).
	Parallelism int
	Logger      *slog.Logger
	Now         func() time.Time
}

// Refresh compares what the state records with the machines: it asks
// the provider to CONFIRM every node that was created, and runs the check
// action of every started service that has one (on nodes that
// confirmed). What no longer matches is drift: a node its provider no
// longer confirms (lost: the plan makes it again), a node whose addresses
// changed (the plan reconfigures what uses them), a service whose check
// fails (not running: the plan starts it). Nothing is written to the
// state; a job planned with the drift applies it when it begins. The
// error is for what stopped the refresh itself (a task that could not run
// at all: no such plugin, the daemon unreachable).
func Refresh(ctx context.Context, cl *state.Cluster, sp *spec.Spec, run Runner, o RefreshOptions) ([]state.Drift, error) {
	if cl == nil {
		return nil, nil
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 16
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	migrate(cl)
	eff, _, err := effectiveSpec(sp, cl, false)
	if err != nil {
		return nil, err
	}
	// Tasks are built against a copy: a result must not change the state.
	data, err := state.Marshal(cl)
	if err != nil {
		return nil, err
	}
	view, err := state.Unmarshal(cl.Name, data)
	if err != nil {
		return nil, err
	}
	// The run ids must be new for every refresh: the queue answers a
	// task id it already ran with that run's outcome, so two refreshes
	// in the same second would otherwise see the first one's checks.
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	stamp := o.Now().UTC().Format("20060102t150405") + "-" + hex.EncodeToString(nonce[:])
	b := &taskBuilder{spec: eff, cluster: view, jobID: cl.Name + "-refresh-" + stamp}
	var (
		mu    sync.Mutex
		drift []state.Drift
		fatal error
	)
	add := func(d state.Drift) {
		mu.Lock()
		drift = append(drift, d)
		mu.Unlock()
	}
	sem := make(chan struct{}, o.Parallelism)
	var wg sync.WaitGroup
	seq := 0
	for _, id := range view.NodeIDs() {
		n := view.Nodes[id]
		if n.State == state.NodeDeleted || !n.CreateRan && n.State == state.NodeNew {
			continue
		}
		seq++
		taskID := fmt.Sprintf("%s-%04d-c", b.jobID, seq)
		confirm, _, err := b.build(taskID, "CONFIRM", n, "")
		if err != nil {
			return nil, fmt.Errorf("refresh: building the CONFIRM of node %s: %w", id, err)
		}
		var checks []checkTask
		for _, svc := range sortedKeys(n.Svc) {
			ss := n.Svc[svc]
			if def := eff.Services[svc]; def == nil || !def.Defines("check") || !ss.Started || ss.Held || !n.Reachable() {
				continue
			}
			c := checkTask{svc: svc, id: fmt.Sprintf("%s-%04d-%s", b.jobID, seq, svc)}
			if c.task, _, err = b.build(c.id, "CHECK", n, svc); err != nil {
				c.err = err
			}
			checks = append(checks, c)
		}
		wg.Add(1)
		go func(n *state.Node, confirm []byte, taskID string, checks []checkTask) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res, err := run.Run(ctx, taskID, confirm)
			switch {
			case err != nil:
				mu.Lock()
				if fatal == nil {
					fatal = fmt.Errorf("refresh: CONFIRM of node %s could not run: %w", n.ID, err)
				}
				mu.Unlock()
				return
			case res.Status != 0:
				msg := firstLine(res.Message, res.Stderr)
				o.Logger.Warn("refresh: the provider no longer confirms the node", "node", n.ID, "message", msg)
				add(state.Drift{Node: n.ID, Kind: state.DriftLost, What: "its provider no longer confirms it: " + msg})
				return
			}
			if len(res.IPAddresses) > 0 && len(n.IPAddresses) > 0 && !sameAddresses(res.IPAddresses, n.IPAddresses) {
				add(state.Drift{Node: n.ID, Kind: state.DriftAddresses, What: fmt.Sprintf("its addresses changed from %s to %s", addrText(n.IPAddresses), addrText(res.IPAddresses)),
					IPAddresses: maps.Clone(res.IPAddresses)})
			}
			for _, c := range checks {
				if c.err != nil {
					add(state.Drift{Node: n.ID, Service: c.svc, Kind: state.DriftStopped, What: "its check could not be built: " + c.err.Error()})
					continue
				}
				res, err := run.Run(ctx, c.id, c.task)
				if err != nil {
					mu.Lock()
					if fatal == nil {
						fatal = fmt.Errorf("refresh: the check of %s on node %s could not run: %w", c.svc, n.ID, err)
					}
					mu.Unlock()
					return
				}
				if res.Status != 0 {
					msg := firstLine(res.Message, res.Stderr)
					o.Logger.Warn("refresh: a service's check failed", "node", n.ID, "service", c.svc, "message", msg)
					add(state.Drift{Node: n.ID, Service: c.svc, Kind: state.DriftStopped, What: "its check failed: " + msg})
				}
			}
		}(n, confirm, taskID, checks)
	}
	wg.Wait()
	if fatal != nil {
		return nil, fatal
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("refresh: %w", context.Cause(ctx))
	}
	sort.Slice(drift, func(i, j int) bool {
		if drift[i].Node != drift[j].Node {
			return view.Nodes[drift[i].Node].Num < view.Nodes[drift[j].Node].Num
		}
		return drift[i].Service < drift[j].Service
	})
	return drift, nil
}

type checkTask struct {
	svc, id string
	task    []byte
	err     error
}

func sameAddresses(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if fmt.Sprint(b[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

func addrText(m map[string]any) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(parts, " ")
}
