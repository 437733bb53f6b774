package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/state"
)

// clusterStore is where the cluster commands keep cluster state: files in
// a state dir (--local, --state-dir) or the store of the loomd at
// --server (its JetStream bucket, through /v1/clusters/{name}/state).
type clusterStore interface {
	state.Journal
	// Lock takes the cluster's apply lock, or says who holds it.
	Lock(name string) (unlock func(), err error)
	// Where names the store for messages.
	Where() string
}

// clusterStore opens the state files when --local or --state-dir is given,
// else the daemon's store.
func (a *App) clusterStore(ctx context.Context, o *clusterOptions) (clusterStore, error) {
	if !o.local && o.stateDir == "" {
		c, err := o.client.client()
		if err != nil {
			return nil, err
		}
		return &apiStore{c: c, ctx: ctx, warn: func(msg string) { fmt.Fprintln(a.Err, "loomd: "+msg) }}, nil
	}
	dir := o.stateDir
	if dir == "" {
		var err error
		if dir, err = a.defaultStateDir(); err != nil {
			return nil, err
		}
	}
	return fileStore{&state.FileStore{Dir: dir}}, nil
}

// defaultStateDir is where --local keeps cluster state files.
func (a *App) defaultStateDir() (string, error) {
	switch {
	case a.Getenv("XDG_STATE_HOME") != "":
		return filepath.Join(a.Getenv("XDG_STATE_HOME"), "loomd", "clusters"), nil
	case a.Getenv("HOME") != "":
		return filepath.Join(a.Getenv("HOME"), ".local", "state", "loomd", "clusters"), nil
	}
	return "", usageErr(errors.New("no --state-dir, and neither XDG_STATE_HOME nor HOME is set"))
}

// getCluster returns the cluster's state, or nil when there is none. A
// cluster the daemon does not know but whose state file is in the default
// state dir (applied with --local, or before the daemon kept cluster
// state) is an error: applying it anew would make its machines twice.
func (a *App) getCluster(st clusterStore, name string) (*state.Cluster, error) {
	cl, err := st.Get(name)
	if errors.Is(err, state.ErrNotFound) {
		if hint := a.stateFileHint(st, name); hint != "" {
			return nil, errors.New(hint)
		}
		return nil, nil
	}
	return cl, err
}

// stateFileHint says where a cluster the daemon does not know has its
// state file, or "".
func (a *App) stateFileHint(st clusterStore, name string) string {
	as, ok := st.(*apiStore)
	if !ok {
		return ""
	}
	dir, err := a.defaultStateDir()
	if err != nil {
		return ""
	}
	if _, err := (&state.FileStore{Dir: dir}).Get(name); err != nil {
		return ""
	}
	return fmt.Sprintf("cluster %s is not in the store of the loomd at %s, but %s holds its state (applied with --local): "+
		"run 'loomd cluster import %s --server %s' to move it to the daemon, or add --local to keep it in files",
		name, as.c.base, filepath.Join(dir, name+".json"), name, as.c.base)
}

type fileStore struct{ *state.FileStore }

func (s fileStore) Where() string { return "state dir " + s.Dir }

// apiStore keeps cluster state in a loomd's store.
type apiStore struct {
	c    *apiClient
	ctx  context.Context
	warn func(string)
}

// lockTTL is the apply lock's lease; it is renewed every third of it.
const lockTTL = 15 * time.Second

func (s *apiStore) Where() string { return "the loomd at " + s.c.base }

func (s *apiStore) path(name, sub string) string {
	return "/v1/clusters/" + url.PathEscape(name) + sub
}

func (s *apiStore) Get(name string) (*state.Cluster, error) {
	var raw json.RawMessage
	err := s.c.do(s.ctx, "GET", s.path(name, "/state"), nil, &raw)
	var ae *apiError
	if errors.As(err, &ae) && ae.code == http.StatusNotFound {
		return nil, fmt.Errorf("cluster %s: %w (in the store of the loomd at %s)", name, state.ErrNotFound, s.c.base)
	}
	if errors.As(err, &ae) && ae.code == http.StatusBadRequest {
		return nil, fmt.Errorf("cluster name %q: %w", name, state.ErrBadName)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster %s: reading its state: %w", name, err)
	}
	return state.Unmarshal(name, raw)
}

func (s *apiStore) Put(c *state.Cluster) error {
	data, err := state.Marshal(c)
	if err != nil {
		return fmt.Errorf("cluster %s: encoding its state: %w", c.Name, err)
	}
	return s.c.do(s.ctx, "PUT", s.path(c.Name, "/state"), data, nil)
}

func (s *apiStore) Append(c *state.Cluster, changes []state.Change) error {
	data, err := json.Marshal(api.ClusterChanges{Changes: changes})
	if err != nil {
		return fmt.Errorf("cluster %s: encoding its changes: %w", c.Name, err)
	}
	// The journal is written even while the apply is being interrupted:
	// what finished must be on record.
	return s.c.do(context.WithoutCancel(s.ctx), "POST", s.path(c.Name, "/changes"), data, nil)
}

func (s *apiStore) List() ([]string, error) {
	var out struct {
		Clusters []api.ClusterSummary `json:"clusters"`
	}
	if err := s.c.do(s.ctx, "GET", "/v1/clusters", nil, &out); err != nil {
		return nil, fmt.Errorf("listing clusters: %w", err)
	}
	names := make([]string, 0, len(out.Clusters))
	for _, c := range out.Clusters {
		names = append(names, c.Name)
	}
	return names, nil
}

func (s *apiStore) Delete(name string) error {
	return s.c.do(s.ctx, "DELETE", s.path(name, "/state"), nil, nil)
}

// Lock takes the cluster's lock on the daemon for a lease it renews in
// the background. A lease held by a process of this host that is gone (a
// killed apply) is taken over at once; one held elsewhere is waited for
// until it expires, if it is not renewed.
func (s *apiStore) Lock(name string) (func(), error) {
	host, _ := os.Hostname()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	req := api.LockRequest{Holder: state.Holder{Owner: fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(rnd[:])),
		Host: host, PID: os.Getpid()}, TTLMs: lockTTL.Milliseconds()}
	take := func() (*state.Holder, error) {
		data, _ := json.Marshal(req)
		err := s.c.do(s.ctx, "POST", s.path(name, "/lock"), data, nil)
		var ae *apiError
		if errors.As(err, &ae) && ae.code == http.StatusConflict {
			var lc api.LockConflict
			if json.Unmarshal(ae.body, &lc) == nil && lc.Holder.Owner != "" {
				return &lc.Holder, fmt.Errorf("%s", lc.Error)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("cluster %s: taking its apply lock: %w", name, err)
		}
		return nil, nil
	}
	deadline := time.Now().Add(lockTTL + 5*time.Second)
	for {
		holder, err := take()
		if err == nil {
			break
		}
		if holder == nil {
			return nil, err
		}
		switch {
		case holder.Host == host && !processAlive(holder.PID) && req.Takeover != holder.Owner:
			s.warn(fmt.Sprintf("cluster %s: the apply that held its lock (pid %d) is gone: taking the lock over", name, holder.PID))
			req.Takeover = holder.Owner
			continue
		case holder.Host != host && time.Now().Before(deadline):
			wait := time.Until(holder.Expires) + 500*time.Millisecond
			wait = min(max(wait, 500*time.Millisecond), time.Until(deadline))
			if wait > 0 {
				s.warn(fmt.Sprintf("%v; waiting %s for its lease to end", err, wait.Round(time.Second)))
				select {
				case <-time.After(wait):
					continue
				case <-s.ctx.Done():
					return nil, s.ctx.Err()
				}
			}
		}
		return nil, err
	}
	req.Takeover = ""
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(lockTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if _, err := take(); err != nil {
					s.warn(fmt.Sprintf("renewing the apply lock of cluster %s: %v", name, err))
				}
			}
		}
	}()
	return func() {
		close(stop)
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 5*time.Second)
		defer cancel()
		// Best effort: a lock left behind expires with its lease.
		_ = s.c.do(ctx, "DELETE", s.path(name, "/lock")+"?owner="+url.QueryEscape(req.Owner), nil, nil)
	}, nil
}

// processAlive says whether a process of this host exists.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
