package plugtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Acceptance mode, as Terraform's TF_ACC: tests tagged #acceptance run
// against the real API with loomd test --acceptance (or LOOM_ACC=1),
// with credentials from the environment that the test file declares
// (loom.test.acceptance{env = {...}}); their values never reach the
// report. --record writes the real exchanges, secrets redacted, to
// testdata/<file>.cassette.json beside the tests, and a plain loomd test
// replays them offline: the same test file runs both ways. A sweeper the
// file declares deletes what the acceptance tests created.

// AccPrefix starts the names of what acceptance tests create (acc.prefix
// adds a per-run part): a sweeper, and loomd test --sweep, delete what
// carries it.
const AccPrefix = "loomacc-"

// accTag is the tag of acceptance tests.
const accTag = "acceptance"

// exchange is one recorded request and its answer.
type exchange struct {
	Method      string            `json:"method"`
	URL         string            `json:"url"`
	RequestBody string            `json:"request_body,omitempty"`
	Status      int               `json:"status"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        string            `json:"body,omitempty"`
	used        bool
}

// cassette is a test file's recording.
type cassette struct {
	Note     string                 `json:"note"`
	Recorded string                 `json:"recorded"`
	Values   map[string]string      `json:"values"`
	Tests    map[string][]*exchange `json:"tests"`
}

// accDecl is what loom.test.acceptance declared.
type accDecl struct {
	env      []string          // secrets, required
	optional map[string]string // other values, with defaults
	hosts    []string
	sweeper  *lua.LFunction
	line     int         // where the file declares it
	envT     *lua.LTable // acc.env, also the sweeper's s.env
}

type tracked struct{ kind, id string }

// accRun is a test file's acceptance state.
type accRun struct {
	f       *fileRun
	live    bool // --acceptance: against the real API
	record  bool
	decl    *accDecl
	values  map[string]string // the environment's values (live)
	prefix  string
	cas     *cassette // the recording read (replay), or being written
	casPath string
	rt      http.RoundTripper // the network (live)

	mu      sync.Mutex
	active  string // the acceptance test (or "sweeper") running
	replay  bool   // it replays its recording
	tape    []*exchange
	missing []string
	tracked []tracked
}

func newAccRun(f *fileRun) *accRun {
	a := &accRun{f: f, live: f.opts.Acceptance, record: f.opts.Record}
	stem := strings.TrimSuffix(filepath.Base(f.file), ".lua")
	a.casPath = filepath.Join(filepath.Dir(f.file), "testdata", stem+".cassette.json")
	if data, err := os.ReadFile(a.casPath); err == nil {
		var c cassette
		if json.Unmarshal(data, &c) == nil {
			a.cas = &c
		}
	}
	if a.live {
		b := make([]byte, 4)
		rand.Read(b)
		a.prefix = AccPrefix + hex.EncodeToString(b) + "-"
		if f.opts.Sweep {
			a.prefix = AccPrefix
		}
		a.rt = http.DefaultTransport.(*http.Transport).Clone()
	} else if a.cas != nil {
		a.prefix = a.cas.Values["prefix"]
	}
	if a.prefix == "" {
		a.prefix = AccPrefix + "replay-"
	}
	return a
}

var accOptionNames = []string{"env", "optional", "hosts", "sweeper"}

// declare is loom.test.acceptance{env = {...}, optional = {...}, hosts =
// {...}, sweeper = fn}: what the file's acceptance tests need. It
// returns acc: acc.env.NAME (inside #acceptance tests and the sweeper),
// acc.prefix, acc:track(kind, id), acc.live, acc.replay.
func (a *accRun) declare(L *lua.LState) int {
	if a.decl != nil {
		L.RaiseError("loom.test.acceptance: declared twice in this file")
	}
	opts := L.CheckTable(1)
	d := &accDecl{optional: map[string]string{}}
	opts.ForEach(func(k, v lua.LValue) {
		key := k.String()
		switch key {
		case "env":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "env must be a list of environment variable names (the credentials)")
			}
			t.ForEach(func(_, n lua.LValue) { d.env = append(d.env, n.String()) })
		case "optional":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "optional must be a table {NAME = default}")
			}
			t.ForEach(func(n, def lua.LValue) { d.optional[n.String()] = def.String() })
		case "hosts":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "hosts must be a list of host names the tests may reach")
			}
			t.ForEach(func(_, h lua.LValue) { d.hosts = append(d.hosts, strings.ToLower(h.String())) })
		case "sweeper":
			fn, ok := v.(*lua.LFunction)
			if !ok {
				L.ArgError(1, "sweeper must be a function(s)")
			}
			d.sweeper = fn
		default:
			L.ArgError(1, fmt.Sprintf("unknown option %q: options are %s", key, strings.Join(accOptionNames, ", ")))
		}
	})
	d.line = whereLine(L, 1)
	a.decl = d
	if a.live {
		a.values = map[string]string{}
		for _, n := range d.env {
			if v, ok := os.LookupEnv(n); ok {
				a.values[n] = v
			}
		}
		for n, def := range d.optional {
			a.values[n] = def
			if v, ok := os.LookupEnv(n); ok && v != "" {
				a.values[n] = v
			}
		}
	}
	acc := L.CreateTable(0, 4)
	env := L.CreateTable(0, 0)
	envMeta := L.CreateTable(0, 2)
	envMeta.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LString(a.value(L, L.CheckString(2))))
		return 1
	}))
	envMeta.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("acc.env is read only: the values come from the environment")
		return 0
	}))
	env.Metatable = envMeta
	d.envT = env
	acc.RawSetString("env", env)
	acc.RawSetString("prefix", lua.LString(a.prefix))
	acc.RawSetString("live", lua.LBool(a.live))
	acc.RawSetString("track", L.NewFunction(func(L *lua.LState) int {
		// acc:track(kind, id): something the test made, for the sweeper.
		kind, id := L.CheckString(2), L.CheckAny(3).String()
		a.mu.Lock()
		a.tracked = append(a.tracked, tracked{kind, id})
		a.mu.Unlock()
		return 0
	}))
	mt := L.CreateTable(0, 1)
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		switch L.CheckString(2) {
		case "replay":
			a.mu.Lock()
			L.Push(lua.LBool(a.replay))
			a.mu.Unlock()
			return 1
		}
		return 0
	}))
	acc.Metatable = mt
	L.Push(acc)
	return 1
}

// value is acc.env.NAME: the environment's value in a live run, a
// placeholder (a secret) or the recorded value when replaying.
func (a *accRun) value(L *lua.LState, name string) string {
	a.mu.Lock()
	active, replay := a.active, a.replay
	a.mu.Unlock()
	if active == "" {
		L.RaiseError("acc.env.%s outside an acceptance test: read it in a test tagged #acceptance (or in the sweeper)", name)
	}
	secret := contains(a.decl.env, name)
	def, optional := a.decl.optional[name]
	if !secret && !optional {
		L.RaiseError("acc.env.%s: not declared (loom.test.acceptance{env = {...}} for credentials, optional = {NAME = default} for the rest)", name)
	}
	if replay {
		if secret {
			return "<" + name + ">"
		}
		if v, ok := a.cas.Values[name]; ok {
			return v
		}
		return def
	}
	v, ok := a.values[name]
	if !ok && secret {
		L.RaiseError("acceptance test %q needs %s in the environment (declared by loom.test.acceptance{env = {...}}): set it and run loomd test --acceptance again", active, name)
	}
	return v
}

// start prepares an acceptance test: live, it may reach the declared
// hosts; offline, it replays its recording, or is skipped without one.
func (a *accRun) start(tc *testCase) (skip string) {
	name := tc.fullName()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tape, a.missing, a.replay = nil, nil, false
	if a.live {
		if a.decl == nil {
			return "acceptance test, but the file declares nothing: add loom.test.acceptance{env = {...}, hosts = {...}}"
		}
		a.active = name
		return ""
	}
	if a.cas == nil || a.cas.Tests[name] == nil {
		return "acceptance test: runs against the real API with loomd test --acceptance (or LOOM_ACC=1); record it with --record to replay it offline"
	}
	a.active, a.replay = name, true
	for _, e := range a.cas.Tests[name] {
		c := *e
		a.tape = append(a.tape, &c)
	}
	return ""
}

// end closes an acceptance test: a live recording is kept for the
// cassette; a replay that lacked an exchange fails the test.
func (a *accRun) end() *Failure {
	a.mu.Lock()
	defer a.mu.Unlock()
	name, replay := a.active, a.replay
	a.active, a.replay = "", false
	if name == "" {
		return nil
	}
	if !replay && a.record {
		if a.cas == nil {
			a.cas = &cassette{Tests: map[string][]*exchange{}}
		}
		if a.cas.Tests == nil {
			a.cas.Tests = map[string][]*exchange{}
		}
		a.cas.Tests[name] = a.tape
	}
	if replay && len(a.missing) > 0 {
		return &Failure{Message: fmt.Sprintf("the recording of this test (%s) has no %s: the plugin's requests changed since it was recorded; record it again with loomd test --acceptance --record",
			a.casPath, a.missing[0]), Diff: strings.Join(a.missing, "\n")}
	}
	return nil
}

// hosts are the hosts the running acceptance test may reach: the
// declared ones, those of URL values, and (replaying) the recording's.
func (a *accRun) hostsLocked() []string {
	if a.active == "" || a.decl == nil {
		return nil
	}
	hosts := append([]string{}, a.decl.hosts...)
	add := func(raw string) {
		if u, err := url.Parse(raw); err == nil && u.Hostname() != "" && (u.Scheme == "http" || u.Scheme == "https") {
			hosts = append(hosts, strings.ToLower(u.Hostname()))
		}
	}
	for n := range a.decl.optional {
		if a.replay {
			add(a.cas.Values[n])
		} else {
			add(a.values[n])
		}
	}
	for _, e := range a.tape {
		add(e.URL)
	}
	return hosts
}

// permitted is added to the plugin's allow-list while an acceptance test
// runs.
func (a *accRun) permitted() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hostsLocked()
}

// roundTrip serves a request of an acceptance test that no fake serves:
// from the network (live, recording it with --record) or the recording.
// ok is false when the request is not the acceptance test's to serve.
func (a *accRun) roundTrip(req *http.Request) (resp *http.Response, err error, ok bool) {
	a.mu.Lock()
	active, replay := a.active, a.replay
	host := strings.ToLower(req.URL.Hostname())
	allowed := contains(a.hostsLocked(), host)
	a.mu.Unlock()
	if active == "" || !allowed {
		return nil, nil, false
	}
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(req.Body, 16<<20))
		req.Body.Close()
	}
	if replay {
		return a.replayOne(req), nil, true
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.ContentLength = int64(len(body))
	resp, err = a.rt.RoundTrip(out)
	if err != nil {
		return nil, err, true
	}
	rbody, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(rbody))
	if a.record {
		e := &exchange{Method: req.Method, URL: a.redact(req.URL.String()), RequestBody: a.redactBody(body),
			Status: resp.StatusCode, Body: a.redactBody(rbody), Headers: map[string]string{}}
		for k, v := range resp.Header {
			if k == "Set-Cookie" || k == "Date" || len(v) == 0 {
				continue
			}
			e.Headers[k] = a.redact(v[0])
		}
		a.mu.Lock()
		a.tape = append(a.tape, e)
		a.mu.Unlock()
	}
	return resp, nil, true
}

// replayOne answers a request from the recording: the first unused
// exchange with the same method and URL.
func (a *accRun) replayOne(req *http.Request) *http.Response {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := req.URL.String()
	for _, e := range a.tape {
		if e.used || e.Method != req.Method || e.URL != u {
			continue
		}
		e.used = true
		h := http.Header{}
		for k, v := range e.Headers {
			h.Set(k, v)
		}
		return &http.Response{StatusCode: e.Status, Status: fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status)),
			Header: h, Body: io.NopCloser(strings.NewReader(e.Body)), ContentLength: int64(len(e.Body)),
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req}
	}
	a.missing = append(a.missing, req.Method+" "+u)
	msg := "loomd test: the recording has no " + req.Method + " " + u + "; record again with loomd test --acceptance --record"
	return &http.Response{StatusCode: 599, Status: "599 not recorded", Header: http.Header{}, Body: io.NopCloser(strings.NewReader(msg)),
		ContentLength: int64(len(msg)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: req}
}

// redact replaces the declared secrets' values with <NAME>.
func (a *accRun) redact(s string) string {
	if a.decl == nil || !a.live {
		return s
	}
	names := append([]string{}, a.decl.env...)
	// Longest first, so a secret inside another is not cut in two.
	sort.Slice(names, func(i, j int) bool { return len(a.values[names[i]]) > len(a.values[names[j]]) })
	for _, n := range names {
		if v := a.values[n]; len(v) >= 4 {
			s = strings.ReplaceAll(s, v, "<"+n+">")
			s = strings.ReplaceAll(s, url.QueryEscape(v), "<"+n+">")
		}
	}
	return s
}

// secretKeys are JSON keys whose values a recording never keeps.
var secretKeys = []string{"password", "passwd", "pass", "secret", "token", "root_pass", "api_key", "apikey", "private_key", "authorization", "credential", "credentials"}

// redactBody redacts a body: the secrets, and in a JSON body the values
// of keys named like a credential.
func (a *accRun) redactBody(b []byte) string {
	s := a.redact(string(b))
	var v any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			for k, val := range t {
				lk := strings.ToLower(k)
				hit := false
				for _, sk := range secretKeys {
					if lk == sk || strings.HasSuffix(lk, "_"+sk) {
						hit = true
					}
				}
				if _, isStr := val.(string); hit && isStr {
					t[k] = "<redacted>"
				} else {
					t[k] = walk(val)
				}
			}
		case []any:
			for i := range t {
				t[i] = walk(t[i])
			}
		}
		return x
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return s
	}
	return string(out)
}

// redactResult keeps the declared secrets out of a test's report.
func (a *accRun) redactResult(r *TestResult) {
	if a.decl == nil || !a.live {
		return
	}
	if r.Failure != nil {
		a.redactFailure(r.Failure)
	}
	for i := range r.Logs {
		r.Logs[i] = a.redact(r.Logs[i])
	}
}

func (a *accRun) redactFailure(f *Failure) {
	f.Message, f.Diff, f.Traceback, f.Location = a.redact(f.Message), a.redact(f.Diff), a.redact(f.Traceback), a.redact(f.Location)
}

// sweep runs the file's sweeper (live only), with what the tests tracked.
func (a *accRun) sweep(L *lua.LState) *Failure {
	if !a.live || a.decl == nil || a.decl.sweeper == nil {
		return nil
	}
	a.mu.Lock()
	a.active = "sweeper"
	list := append([]tracked{}, a.tracked...)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.active = ""
		a.mu.Unlock()
	}()
	s := L.CreateTable(0, 3)
	s.RawSetString("prefix", lua.LString(a.prefix))
	s.RawSetString("env", a.decl.envT)
	t := L.CreateTable(len(list), 0)
	for _, x := range list {
		e := L.CreateTable(0, 2)
		e.RawSetString("kind", lua.LString(x.kind))
		e.RawSetString("id", lua.LString(x.id))
		t.Append(e)
	}
	s.RawSetString("tracked", t)
	a.f.clock.reset()
	a.f.clock.setReal()
	return a.f.callOutside(a.decl.sweeper, s)
}

// save writes the recording (--record), keeping the other tests'.
func (a *accRun) save() error {
	if !a.record || a.cas == nil || len(a.cas.Tests) == 0 {
		return nil
	}
	a.cas.Note = "Recorded by loomd test --acceptance --record against the real API; the declared credentials are replaced by <NAME> and credential-like JSON values by <redacted>. A plain loomd test replays it offline."
	a.cas.Recorded = time.Now().UTC().Format(time.RFC3339)
	if a.cas.Values == nil {
		a.cas.Values = map[string]string{}
	}
	a.cas.Values["prefix"] = a.prefix
	for n := range a.decl.optional {
		a.cas.Values[n] = a.redact(a.values[n])
	}
	data, err := json.MarshalIndent(a.cas, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(a.casPath), 0o755); err != nil {
		return err
	}
	return os.WriteFile(a.casPath, append(data, '\n'), 0o644)
}
