package console

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/loomrt/loom/internal/queue"
)

// Live updates. A page names what it shows in its body's data-events
// attribute (topics: overview, tasks, task:<id>, clusters,
// cluster:<name>, plugins, coopr) and opens one stream,
// GET /ui/events?topic=..., of server-sent events. The daemon's watches
// (task records, the cluster bucket, plugin reloads, a followed task's
// log lines from any daemon) publish topics to the
// hub; the hub only marks each interested stream dirty, so a publisher
// never waits on a viewer. Each stream sends what became dirty at most
// once per minInterval, however many changes came (backpressure: a
// thousand task changes a second cost a viewer one event a second), and
// a comment line every Heartbeat while idle, which keeps proxies and
// load balancers from closing it. The page then fetches itself and swaps
// its live regions: the data travels as the same escaped HTML as the
// first render, never as event payload.
const (
	topicOverview = "overview"
	topicTasks    = "tasks"
	topicClusters = "clusters"
	topicPlugins  = "plugins"
	topicCoopr    = "coopr"
	// minInterval is the least time between two events of one stream.
	minInterval = time.Second
	// writeTimeout drops a viewer that does not read its stream.
	writeTimeout = 10 * time.Second
)

type hub struct {
	mu       sync.Mutex
	subs     map[*stream]struct{}
	max      int
	interval time.Duration // the least time between two events of a stream
	closed   bool
	done     chan struct{}
}

type stream struct {
	topics  map[string]bool
	pending map[string]bool
	wake    chan struct{} // capacity 1: "something is pending"
}

func newHub(max int, interval time.Duration) *hub {
	return &hub{subs: map[*stream]struct{}{}, max: max, interval: interval, done: make(chan struct{})}
}

// subscribe adds a stream for topics; nil when the hub is full or closed.
func (h *hub) subscribe(topics []string) *stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.subs) >= h.max {
		return nil
	}
	s := &stream{topics: map[string]bool{}, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
	for _, t := range topics {
		s.topics[t] = true
	}
	h.subs[s] = struct{}{}
	return s
}

func (h *hub) unsubscribe(s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
}

// streams is the number of open streams.
func (h *hub) streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// follows reports whether any open stream follows topic.
func (h *hub) follows(topic string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.topics[topic] {
			return true
		}
	}
	return false
}

// publish marks the topics of one change dirty on every stream that
// follows them, all at once: a stream sends them in one event batch, not
// the first alone and the rest an interval later. It never blocks.
func (h *hub) publish(topics ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		dirty := false
		for _, topic := range topics {
			if s.topics[topic] {
				s.pending[topic] = true
				dirty = true
			}
		}
		if !dirty {
			continue
		}
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// take returns and clears a stream's pending topics.
func (h *hub) take(s *stream) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(s.pending))
	for t := range s.pending {
		out = append(out, t)
	}
	clear(s.pending)
	sort.Strings(out)
	return out
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
}

// taskChanged routes a task record change to the pages showing it.
func (c *Console) taskChanged(ch queue.Change) {
	topics := []string{"task:" + ch.TaskID, topicTasks, topicOverview}
	if ch.Cluster != "" {
		topics = append(topics, "cluster:"+ch.Cluster)
	}
	c.hub.publish(topics...)
}

// validTopic accepts the topics pages use.
func validTopic(t string) bool {
	switch t {
	case topicOverview, topicTasks, topicClusters, topicPlugins, topicCoopr:
		return true
	}
	kind, arg, ok := strings.Cut(t, ":")
	return ok && (kind == "task" || kind == "cluster") && arg != "" && len(arg) <= 200
}

// events serves one page's event stream.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	topics := r.URL.Query()["topic"]
	if len(topics) == 0 || len(topics) > 8 {
		http.Error(w, "want 1 to 8 topic= parameters", http.StatusBadRequest)
		return
	}
	clusters := false
	for _, t := range topics {
		if !validTopic(t) {
			http.Error(w, fmt.Sprintf("unknown topic %q", t), http.StatusBadRequest)
			return
		}
		clusters = clusters || t == topicClusters || strings.HasPrefix(t, "cluster:")
	}
	if !c.mayFollow(r, topics) {
		http.Error(w, "a topic names a task or cluster this session does not see", http.StatusNotFound)
		return
	}
	if clusters {
		c.watchClusters(r.Context())
	}
	s := c.hub.subscribe(topics)
	if s == nil {
		// The browser's EventSource tries again after the retry delay.
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("too many live views are open (%d); this page will try again", c.cfg.MaxStreams), http.StatusServiceUnavailable)
		return
	}
	defer c.hub.unsubscribe(s)
	// A task page also changes when the task logs a line, on whichever
	// daemon runs it.
	for _, t := range topics {
		if id, ok := strings.CutPrefix(t, "task:"); ok && c.cfg.TaskLogs != nil {
			topic := t
			if stop, err := c.cfg.TaskLogs.Notify(id, func() { c.hub.publish(topic) }); err == nil {
				defer stop()
				// Lines stored between the page's render and this
				// subscription notified nobody: one change now makes
				// the page read them.
				c.hub.publish(topic)
			}
		}
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	send := func(text string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := fmt.Fprint(w, text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("retry: 3000\n: live\n\n") {
		return
	}
	heartbeat := time.NewTicker(c.cfg.Heartbeat)
	defer heartbeat.Stop()
	var last time.Time
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.hub.done:
			return
		case <-heartbeat.C:
			if !send(": heartbeat\n\n") {
				return
			}
		case <-s.wake:
			if wait := c.hub.interval - time.Since(last); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
					return
				case <-c.hub.done:
					t.Stop()
					return
				}
			}
			var b strings.Builder
			for _, t := range c.hub.take(s) {
				fmt.Fprintf(&b, "event: change\ndata: %s\n\n", t)
			}
			if b.Len() == 0 {
				continue
			}
			last = time.Now()
			if !send(b.String()) {
				return
			}
			heartbeat.Reset(c.cfg.Heartbeat)
		}
	}
}

// mayFollow checks that a tenant's session follows only its own tasks
// and clusters (an event only says "changed", but when is information).
func (c *Console) mayFollow(r *http.Request, topics []string) bool {
	sc := c.scope(r)
	if sc.all {
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	for _, t := range topics {
		kind, arg, _ := strings.Cut(t, ":")
		switch kind {
		case "task":
			rec, err := c.cfg.Queue.Get(ctx, arg)
			if err != nil || !sc.allows(rec.TenantID) {
				return false
			}
		case "cluster":
			st, err := c.clusterState(ctx)
			if err != nil {
				return false
			}
			if cl, err := st.Get(arg); err == nil && !sc.allows(cl.Tenant) {
				return false
			}
		}
	}
	return true
}

// watchClusters starts the cluster bucket's watch once a page follows a
// cluster (the store is opened on first use).
func (c *Console) watchClusters(ctx context.Context) {
	c.clusterMu.Lock()
	started := c.clusterWatch
	c.clusterMu.Unlock()
	if started {
		return
	}
	st, err := c.clusterState(ctx)
	if err != nil {
		c.log.Warn("console: cluster pages will not update by themselves", "err", err)
		return
	}
	c.clusterMu.Lock()
	defer c.clusterMu.Unlock()
	if c.clusterWatch {
		return
	}
	wctx, cancel := context.WithCancel(context.Background())
	go func() { <-c.stopped; cancel() }()
	if err := st.Watch(wctx, func(name string) {
		c.hub.publish("cluster:"+name, topicClusters)
	}); err != nil {
		c.log.Warn("console: cluster pages will not update by themselves", "err", err)
		return
	}
	c.clusterWatch = true
}
