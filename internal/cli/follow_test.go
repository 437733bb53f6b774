package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/runner"
)

// A follower that finds the job ended (its daemon died, the one that took
// it over finished it while the follower was retrying) shows the log lines
// it had not read, the takeover among them, before the summary.
func TestFollowShowsTheLogLeftWhenTheJobEnded(t *testing.T) {
	var jobCalls atomic.Int32
	rec := runner.Record{ID: "shop-002", Cluster: "shop", State: runner.StateRunning, Owner: "loomd a"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/clusters/shop/job":
			jv := api.JobView{Record: rec, LogSeq: 5}
			if jobCalls.Add(1) > 1 { // the second look: ended, by the taker
				jv.State, jv.Owner, jv.Ended = runner.StateComplete, "loomd b", time.Now()
			}
			json.NewEncoder(w).Encode(jv)
		case "/v1/clusters/shop/log":
			out := api.LogResponse{Cluster: "shop", Entries: []api.LogEntry{}, Next: 6}
			if r.URL.Query().Get("after") == "5" {
				out.Entries = append(out.Entries, api.LogEntry{Seq: 6, Entry: joblog.Entry{Time: time.Now(), Kind: joblog.KindJob,
					Job: "shop-002", Level: "INFO", Msg: "job shop-002 taken over by loomd b"}})
			}
			json.NewEncoder(w).Encode(out)
		case "/v1/clusters/shop/state":
			w.Write([]byte(`{"name":"shop","status":"active","nodes":{},"jobs":[{"id":"shop-002","action":"apply","status":"complete"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out, errb lockedBuffer
	code := testApp(nil, &out, &errb).Execute([]string{"cluster", "watch", "shop", "--server", srv.URL, "--log-format", "json"})
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "taken over by loomd b") {
		t.Errorf("watch ended without the log lines past where it had read:\n%s", errb.String())
	}
	if !strings.Contains(out.String(), "Cluster shop: active") {
		t.Errorf("watch's summary:\n%s", out.String())
	}
}

// A follower that reads the job's "ended" entry before the job record says
// so (the daemon writes the log first) looks at the record again with short
// waits for the log, not after the next 2-second one.
func TestFollowLooksAgainWhenTheLogSaysEnded(t *testing.T) {
	var jobCalls atomic.Int32
	var longWaits atomic.Int32
	ended := make(chan struct{})
	var once atomic.Bool
	rec := runner.Record{ID: "shop-001", Cluster: "shop", State: runner.StateRunning, Owner: "loomd a"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/clusters/shop/job":
			jv := api.JobView{Record: rec, LogSeq: 5}
			// Done from the third look on: the two looks after the
			// "ended" entry still find the record running.
			if jobCalls.Add(1) > 3 {
				jv.State, jv.Ended = runner.StateComplete, time.Now()
			}
			json.NewEncoder(w).Encode(jv)
		case "/v1/clusters/shop/log":
			out := api.LogResponse{Cluster: "shop", Entries: []api.LogEntry{}, Next: 6}
			if r.URL.Query().Get("after") == "5" {
				out.Entries = append(out.Entries, api.LogEntry{Seq: 6, Entry: joblog.Entry{Time: time.Now(), Kind: joblog.KindJob,
					Job: "shop-001", Level: "INFO", Msg: "job shop-001 complete", Attrs: []joblog.Attr{{K: "event", V: "ended"}}}})
				if once.CompareAndSwap(false, true) {
					close(ended)
				}
			} else if r.URL.Query().Get("wait") == "2s" {
				select {
				case <-ended:
					longWaits.Add(1)
				default:
				}
			}
			json.NewEncoder(w).Encode(out)
		case "/v1/clusters/shop/state":
			w.Write([]byte(`{"name":"shop","status":"active","nodes":{},"jobs":[{"id":"shop-001","action":"apply","status":"complete"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out, errb lockedBuffer
	code := testApp(nil, &out, &errb).Execute([]string{"cluster", "watch", "shop", "--server", srv.URL, "--log-format", "json"})
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if n := longWaits.Load(); n != 0 {
		t.Errorf("after the log said the job ended, the follower waited %d time(s) 2 s for the log before looking at the record again", n)
	}
	if jobCalls.Load() < 4 || !strings.Contains(out.String(), "Cluster shop: active") {
		t.Errorf("watch: %d looks at the job, summary:\n%s", jobCalls.Load(), out.String())
	}
}

// After the log says the job ended, the follower looks at the record
// again after a short wait for the log (the daemon records the end a few
// milliseconds after the entry), then after waits twice as long each time:
// it ends soon after its job without polling a record that stays running
// (a store failing under the daemon's finish) many times a second.
func TestFollowEndWaitsStartShortAndBackOff(t *testing.T) {
	var jobCalls atomic.Int32
	var mu sync.Mutex
	var waits []time.Duration
	var ended atomic.Bool
	rec := runner.Record{ID: "shop-001", Cluster: "shop", State: runner.StateRunning, Owner: "loomd a"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/clusters/shop/job":
			jv := api.JobView{Record: rec, LogSeq: 5}
			// Done from the seventh look on: five looks after the
			// "ended" entry still find the record running.
			if jobCalls.Add(1) > 6 {
				jv.State, jv.Ended = runner.StateComplete, time.Now()
			}
			json.NewEncoder(w).Encode(jv)
		case "/v1/clusters/shop/log":
			out := api.LogResponse{Cluster: "shop", Entries: []api.LogEntry{}, Next: 6}
			if r.URL.Query().Get("after") == "5" {
				out.Entries = append(out.Entries, api.LogEntry{Seq: 6, Entry: joblog.Entry{Time: time.Now(), Kind: joblog.KindJob,
					Job: "shop-001", Level: "INFO", Msg: "job shop-001 complete", Attrs: []joblog.Attr{{K: "event", V: "ended"}}}})
				ended.Store(true)
			} else if ended.Load() && r.URL.Query().Has("wait") { // not the drain at the end
				d, err := time.ParseDuration(r.URL.Query().Get("wait"))
				if err != nil {
					t.Errorf("log request %s: %v", r.URL, err)
				}
				mu.Lock()
				waits = append(waits, d)
				mu.Unlock()
			}
			json.NewEncoder(w).Encode(out)
		case "/v1/clusters/shop/state":
			w.Write([]byte(`{"name":"shop","status":"active","nodes":{},"jobs":[{"id":"shop-001","action":"apply","status":"complete"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out, errb lockedBuffer
	code := testApp(nil, &out, &errb).Execute([]string{"cluster", "watch", "shop", "--server", srv.URL, "--log-format", "json"})
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) < 4 {
		t.Fatalf("waits for the log after the job's end: %v, want one per look at the record still running", waits)
	}
	if waits[0] > 10*time.Millisecond {
		t.Errorf("the first wait after the job's end: %v, want at most 10ms: %v", waits[0], waits)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] <= waits[i-1] || waits[i] > time.Second {
			t.Errorf("wait %d after the job's end: %v after %v, want longer each time, at most 1s: %v", i+1, waits[i], waits[i-1], waits)
		}
	}
}

// Without the live view (not a terminal, or --log-format json), the
// follower asks the daemon for log lines and job events only: the tasks'
// state changes (two or three per task) are for the view alone.
func TestFollowWithoutTheViewSkipsTaskEvents(t *testing.T) {
	var jobCalls atomic.Int32
	var mu sync.Mutex
	var kinds []string
	rec := runner.Record{ID: "shop-001", Cluster: "shop", State: runner.StateRunning, Owner: "loomd a"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/clusters/shop/job":
			jv := api.JobView{Record: rec, LogSeq: 5}
			if jobCalls.Add(1) > 1 {
				jv.State, jv.Ended = runner.StateComplete, time.Now()
			}
			json.NewEncoder(w).Encode(jv)
		case "/v1/clusters/shop/log":
			mu.Lock()
			kinds = append(kinds, r.URL.Query().Get("kind"))
			mu.Unlock()
			out := api.LogResponse{Cluster: "shop", Entries: []api.LogEntry{}, Next: 6}
			if r.URL.Query().Get("after") == "5" {
				out.Entries = append(out.Entries, api.LogEntry{Seq: 6, Entry: joblog.Entry{Time: time.Now(), Kind: joblog.KindLog,
					Job: "shop-001", Level: "WARN", Msg: "a plugin's warning"}})
			}
			json.NewEncoder(w).Encode(out)
		case "/v1/clusters/shop/state":
			w.Write([]byte(`{"name":"shop","status":"active","nodes":{},"jobs":[{"id":"shop-001","action":"apply","status":"complete"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	var out, errb lockedBuffer
	code := testApp(nil, &out, &errb).Execute([]string{"cluster", "watch", "shop", "--server", srv.URL, "--log-format", "json"})
	if code != 0 {
		t.Fatalf("watch: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "a plugin's warning") {
		t.Errorf("the job's log line is not shown:\n%s", errb.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kinds) == 0 {
		t.Fatal("no log request")
	}
	for i, k := range kinds {
		if k != "log,job" {
			t.Errorf("log request %d of %d asks for kind=%q, want log,job: %q", i+1, len(kinds), k, kinds)
		}
	}
}

// The summary at a job's end reads the state as a summary shows it: that
// job alone, its finished tasks' records cut to their status (a 100-node
// create's whole state is about 314 KB). A daemon that answers the whole
// state (one before these parameters) gives the same summary.
func TestFollowSummaryReadsTheJobBrief(t *testing.T) {
	for _, whole := range []bool{false, true} {
		var mu sync.Mutex
		var queries []string
		rec := runner.Record{ID: "shop-002", Cluster: "shop", State: runner.StateComplete, Owner: "loomd a", Ended: time.Now()}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch r.URL.Path {
			case "/v1/clusters/shop/job":
				json.NewEncoder(w).Encode(api.JobView{Record: rec, LogSeq: 5})
			case "/v1/clusters/shop/log":
				json.NewEncoder(w).Encode(api.LogResponse{Cluster: "shop", Entries: []api.LogEntry{}, Next: 5})
			case "/v1/clusters/shop/state":
				mu.Lock()
				queries = append(queries, r.URL.RawQuery)
				mu.Unlock()
				old := `{"id":"shop-001","action":"apply","status":"complete","tasks":{"0":{"status":"done","taskName":"CREATE","node":"shop-n-1"}}},`
				tasks := `{"0":{"status":"done"},"1":{"status":"done"},"2":{"status":"skipped"}}`
				if whole || r.URL.Query().Get("job") != "shop-002" {
					tasks = `{"0":{"status":"done","taskName":"CREATE","node":"shop-n-1","runs":[{"taskId":"shop-002-0000-1","taskName":"CREATE","status":"done"}]},` +
						`"1":{"status":"done","taskName":"CONFIRM","node":"shop-n-1"},"2":{"status":"skipped","taskName":"START","node":"shop-n-1"}}`
				} else {
					old = ""
				}
				w.Write([]byte(`{"name":"shop","status":"active","nodes":{"shop-n-1":{"id":"shop-n-1","hostname":"n1.example","state":"active"}},"jobs":[` + old +
					`{"id":"shop-002","action":"apply","status":"complete","taskCount":3,"tasks":` + tasks + `}]}`))
			default:
				http.NotFound(w, r)
			}
		}))
		var out, errb lockedBuffer
		code := testApp(nil, &out, &errb).Execute([]string{"cluster", "watch", "shop", "--server", srv.URL, "--log-format", "json"})
		srv.Close()
		if code != 0 {
			t.Fatalf("watch: exit %d\n%s\n%s", code, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "Cluster shop: active (job shop-002, apply: complete, 2/3 tasks done") || !strings.Contains(out.String(), "n1.example") {
			t.Errorf("whole state %v: summary:\n%s", whole, out.String())
		}
		mu.Lock()
		if len(queries) != 1 || queries[0] != "brief=true&job=shop-002" {
			t.Errorf("whole state %v: the summary read the state with %q, want once with brief=true&job=shop-002", whole, queries)
		}
		mu.Unlock()
	}
}
