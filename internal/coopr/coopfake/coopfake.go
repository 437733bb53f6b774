// Package coopfake is a Coopr server, as far as a provisioner sees it, for
// tests: the internal (tasks) API a provisioner calls, written from
// ../shared/reference/coopr-provisioner.md §2.1 and strict about paths,
// methods, bodies and status codes, with the server's bookkeeping (tenants'
// task queues, provisioners, task owners, finishes) and faults on demand:
// 5xx answers, slow answers, dropped answers and restarts.
//
// It also plays the server's side of the provisioner's own API (§2.2):
// PutTenant and DeleteTenant call the provisioner as the Java server does.
package coopfake

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Finish is one accepted POST /v2/tasks/finish.
type Finish struct {
	TaskID        string
	ProvisionerID string
	WorkerID      string
	TenantID      string
	Status        int
	Body          map[string]any
}

// Provisioner is a registered provisioner as the server keeps it.
type Provisioner struct {
	ID            string
	CapacityTotal int
	Host          string
	Port          int
	Heartbeats    int
	Usage         map[string]int
	LastHeartbeat time.Time
}

// task is a queued or in-progress task.
type task struct {
	id, tenant string
	body       []byte
	owner      string // provisionerId.workerId while in progress
	takenAt    time.Time
}

// Fault is a misbehaviour applied to the next requests matching it.
type Fault struct {
	// Path is matched as a prefix of the request path ("/v2/tasks/finish").
	Path string
	// Status, when non-zero, is answered instead of handling the request.
	Status int
	// Delay holds the request this long before handling it.
	Delay time.Duration
	// DropAfter handles the request (its effect happens) and then closes
	// the connection without an answer: a server that died after acting.
	DropAfter bool
	// AnswerDelay handles the request at once (its effect happens) and
	// holds its answer this long: a reply in flight while the client
	// changes its mind.
	AnswerDelay time.Duration
	// Times is how many requests the fault applies to (0 means 1).
	Times int
	// WhenStatus, with DropAfter, applies the fault only to a request the
	// server answers with this status (200: a take that hands out a task),
	// so polls that find nothing do not use it up.
	WhenStatus int
}

// Server is the fake. Its zero value is not usable; call Start.
type Server struct {
	// TaskTimeout requeues a task taken this long ago and not finished,
	// as the server's server.task.timeout.seconds (default 1800 s) does.
	// Zero means never. Set it before the first request; SetTaskTimeout
	// changes it while serving.
	TaskTimeout time.Duration

	mu           sync.Mutex
	addr         string
	tls          *tls.Config // nil: plain HTTP
	ln           net.Listener
	srv          *http.Server
	provisioners map[string]*Provisioner
	queues       map[string][]*task // tenant -> queued
	inProgress   map[string]*task   // taskId -> task
	finishes     []Finish
	refused      map[int]int // status -> count of refused requests
	takes        map[string]int
	plugins      map[string]json.RawMessage // "providertypes/aws" -> body
	resources    map[string][]byte          // download path -> bytes
	faults       []*Fault
	log          []string
	conns        map[net.Conn]struct{}
}

// Start listens on a loopback port and serves plain HTTP.
func Start() (*Server, error) { return StartTLS(nil) }

// StartTLS listens on a loopback port and serves HTTPS with cfg (its
// certificate, and ClientAuth and ClientCAs for a server that requires
// client certificates, as Coopr's could); a nil cfg serves plain HTTP.
// Restarts keep serving TLS.
func StartTLS(cfg *tls.Config) (*Server, error) {
	s := &Server{
		tls:          cfg,
		provisioners: map[string]*Provisioner{},
		queues:       map[string][]*task{},
		inProgress:   map[string]*task{},
		refused:      map[int]int{},
		takes:        map[string]int{},
		plugins:      map[string]json.RawMessage{},
		resources:    map[string][]byte{},
		conns:        map[net.Conn]struct{}{},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	return s, nil
}

func (s *Server) serve(ln net.Listener) {
	if s.tls != nil {
		ln = tls.NewListener(ln, s.tls)
	}
	s.ln = ln
	// Handshakes refused on purpose are test cases, not noise for stderr.
	s.srv = &http.Server{Handler: s, ErrorLog: log.New(io.Discard, "", 0), ConnState: func(c net.Conn, st http.ConnState) {
		s.mu.Lock()
		defer s.mu.Unlock()
		switch st {
		case http.StateNew:
			s.conns[c] = struct{}{}
		case http.StateClosed, http.StateHijacked:
			delete(s.conns, c)
		}
	}}
	go s.srv.Serve(ln) //nolint:errcheck // Close ends it
}

// URL is the server's base URL (provisioner.server.uri).
func (s *Server) URL() string {
	if s.tls != nil {
		return "https://" + s.addr
	}
	return "http://" + s.addr
}

// Close stops the server.
func (s *Server) Close() { _ = s.srv.Close() }

// Restart stops the server, cutting every connection (requests in flight
// get no answer), and serves again on the same address after down. Its
// state survives, as the real server's (kept in its database) does.
func (s *Server) Restart(down time.Duration) error {
	_ = s.srv.Close()
	time.Sleep(down)
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ {
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("coopfake: listening again on %s: %w", s.addr, err)
	}
	s.serve(ln)
	return nil
}

// ForgetProvisioners drops every registration, as the server does to a
// provisioner whose heartbeats stopped for server.provisioner.timeout.secs.
func (s *Server) ForgetProvisioners() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.provisioners = map[string]*Provisioner{}
}

// AddFault queues a fault.
func (s *Server) AddFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Times == 0 {
		f.Times = 1
	}
	s.faults = append(s.faults, &f)
}

// Enqueue queues a task (the JSON of §3) for a tenant. Its taskId must be
// set and unique.
func (s *Server) Enqueue(tenant string, taskJSON []byte) error {
	var t struct {
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(taskJSON, &t); err != nil || t.TaskID == "" {
		return fmt.Errorf("coopfake: a task needs a taskId: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queues[tenant] = append(s.queues[tenant], &task{id: t.TaskID, tenant: tenant, body: taskJSON})
	return nil
}

// SetResource makes a resource downloadable at its §2.1 path:
// /v2/tenants/{tenant}/{family}types/{plugin}/{rtype}/{name}/versions/{version}.
func (s *Server) SetResource(tenant, familyTypes, plugin, rtype, name string, version int, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resources[fmt.Sprintf("/v2/tenants/%s/%s/%s/%s/%s/versions/%d", tenant, familyTypes, plugin, rtype, name, version)] = data
}

// Finishes returns the accepted finishes, in order.
func (s *Server) Finishes() []Finish {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Finish(nil), s.finishes...)
}

// WaitFinished waits until the task has an accepted finish, and returns it.
func (s *Server) WaitFinished(ctx context.Context, taskID string) (Finish, error) {
	for {
		for _, f := range s.Finishes() {
			if f.TaskID == taskID {
				return f, nil
			}
		}
		select {
		case <-ctx.Done():
			return Finish{}, fmt.Errorf("coopfake: task %s not finished: %w (log: %s)", taskID, ctx.Err(), strings.Join(s.Log(), "; "))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Provisioner returns a registered provisioner's record.
func (s *Server) Provisioner(id string) (Provisioner, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.provisioners[id]
	if !ok {
		return Provisioner{}, false
	}
	c := *p
	c.Usage = map[string]int{}
	for k, v := range p.Usage {
		c.Usage[k] = v
	}
	return c, true
}

// Plugin returns a registered plugin type's body ("automatortypes/shell").
func (s *Server) Plugin(key string) (json.RawMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.plugins[key]
	return b, ok
}

// Takes counts the tasks handed out per taskId (a retried task counts
// again).
func (s *Server) Takes(taskID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.takes[taskID]
}

// Refused counts the requests the server answered with a status >= 400
// by its own rules (not injected faults).
func (s *Server) Refused(status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[status]
}

// Log returns one line per request: "METHOD path -> status".
func (s *Server) Log() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// fault returns the first fault matching path, counting it down.
func (s *Server) fault(path string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if strings.HasPrefix(path, f.Path) {
			c := *f
			f.Times--
			if f.Times <= 0 {
				s.faults = append(s.faults[:i], s.faults[i+1:]...)
			}
			return &c
		}
	}
	return nil
}

// recorder notes the status a handler answered.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// ServeHTTP routes a request, applying faults first.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := s.fault(r.URL.Path)
	if f != nil && f.Delay > 0 {
		select {
		case <-time.After(f.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if f != nil && f.Status != 0 {
		s.note(r, f.Status, true)
		http.Error(w, "injected fault", f.Status)
		return
	}
	if f != nil && f.AnswerDelay > 0 {
		buf := &bufWriter{h: http.Header{}}
		rec := &recorder{ResponseWriter: buf, status: 200}
		s.route(rec, r)
		s.note(r, rec.status, false)
		time.Sleep(f.AnswerDelay)
		for k, v := range buf.h {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(buf.b.Bytes())
		return
	}
	if f != nil && f.DropAfter {
		buf := &bufWriter{h: http.Header{}}
		rec := &recorder{ResponseWriter: buf, status: 200}
		s.route(rec, r)
		s.note(r, rec.status, false)
		if f.WhenStatus != 0 && rec.status != f.WhenStatus {
			// Not the request the fault waits for: answer it and keep
			// the fault for the next one.
			s.AddFault(Fault{Path: f.Path, DropAfter: true, WhenStatus: f.WhenStatus})
			for k, v := range buf.h {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
			_, _ = w.Write(buf.b.Bytes())
			return
		}
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	rec := &recorder{ResponseWriter: w, status: 200}
	s.route(rec, r)
	s.note(r, rec.status, false)
}

// bufWriter keeps an answer that may never be sent.
type bufWriter struct {
	h http.Header
	b bytes.Buffer
}

func (d *bufWriter) Header() http.Header         { return d.h }
func (d *bufWriter) Write(b []byte) (int, error) { return d.b.Write(b) }
func (d *bufWriter) WriteHeader(int)             {}

func (s *Server) note(r *http.Request, status int, injected bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	line := fmt.Sprintf("%s %s -> %d", r.Method, r.URL.Path, status)
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		// Which client certificate made the request (rotation tests).
		line += " client=" + r.TLS.PeerCertificates[0].Subject.CommonName
	}
	if injected {
		line += " (fault)"
	} else if status >= 400 {
		s.refused[status]++
	}
	s.log = append(s.log, line)
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/v2/tasks/take":
		if s.methods(w, r, http.MethodPost) {
			s.take(w, r)
		}
	case r.URL.Path == "/v2/tasks/finish":
		if s.methods(w, r, http.MethodPost) {
			s.finish(w, r)
		}
	case len(parts) == 3 && parts[0] == "v2" && parts[1] == "provisioners":
		switch r.Method {
		case http.MethodPut:
			s.register(w, r, parts[2])
		case http.MethodDelete:
			s.unregister(w, parts[2])
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	case len(parts) == 4 && parts[0] == "v2" && parts[1] == "provisioners" && parts[3] == "heartbeat":
		if s.methods(w, r, http.MethodPost) {
			s.heartbeat(w, r, parts[2])
		}
	case len(parts) == 4 && parts[0] == "v2" && parts[1] == "plugins" && (parts[2] == "providertypes" || parts[2] == "automatortypes"):
		if s.methods(w, r, http.MethodPut) {
			s.putPlugin(w, r, parts[2], parts[3])
		}
	case len(parts) == 9 && parts[0] == "v2" && parts[1] == "tenants" && parts[7] == "versions":
		if s.methods(w, r, http.MethodGet) {
			s.resource(w, r, parts)
		}
	default:
		http.Error(w, "no such path on the internal port: "+r.URL.Path, http.StatusNotFound)
	}
}

// methods refuses any method but the one the path takes (405).
func (s *Server) methods(w http.ResponseWriter, r *http.Request, m string) bool {
	if r.Method != m {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return false
	}
	return true
}

// readObject reads a JSON object body (400 otherwise).
func readObject(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		http.Error(w, "invalid JSON object", http.StatusBadRequest)
		return nil, false
	}
	return m, true
}

// gsonInt reads an int as Gson would: a number, or a string holding one.
func gsonInt(v any) (int, bool) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.Atoi(x.String())
		return n, err == nil
	case string:
		n, err := strconv.Atoi(x)
		return n, err == nil
	}
	return 0, false
}

func nonEmpty(m map[string]any, keys ...string) (map[string]string, bool) {
	out := map[string]string{}
	for _, k := range keys {
		v, ok := m[k].(string)
		if !ok || v == "" {
			return nil, false
		}
		out[k] = v
	}
	return out, true
}

func (s *Server) register(w http.ResponseWriter, r *http.Request, id string) {
	m, ok := readObject(w, r)
	if !ok {
		return
	}
	bodyID, _ := m["id"].(string)
	capacity, okC := gsonInt(m["capacityTotal"])
	port, okP := gsonInt(m["port"])
	host, _ := m["host"].(string)
	if bodyID != id || !okC || !okP || host == "" || capacity < 0 {
		http.Error(w, "invalid provisioner: id must match the path; capacityTotal, host and port are required", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, exists := s.provisioners[id]
	if !exists {
		p = &Provisioner{ID: id, Usage: map[string]int{}}
		s.provisioners[id] = p
	}
	p.CapacityTotal, p.Host, p.Port = capacity, host, port
}

func (s *Server) unregister(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.provisioners, id)
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, id string) {
	m, ok := readObject(w, r)
	if !ok {
		return
	}
	usage, isObj := m["usage"].(map[string]any)
	if !isObj {
		http.Error(w, "heartbeat needs {\"usage\": {tenant: workers}}", http.StatusBadRequest)
		return
	}
	u := map[string]int{}
	for k, v := range usage {
		n, ok := gsonInt(v)
		if !ok {
			http.Error(w, "usage values must be integers", http.StatusBadRequest)
			return
		}
		u[k] = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, exists := s.provisioners[id]
	if !exists {
		http.Error(w, "provisioner "+id+" not found", http.StatusNotFound)
		return
	}
	p.Usage, p.LastHeartbeat = u, time.Now()
	p.Heartbeats++
}

func (s *Server) take(w http.ResponseWriter, r *http.Request) {
	m, ok := readObject(w, r)
	if !ok {
		return
	}
	ids, ok := nonEmpty(m, "provisionerId", "workerId", "tenantId")
	if !ok {
		http.Error(w, "provisionerId, workerId and tenantId are required", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.provisioners[ids["provisionerId"]]; !known {
		http.Error(w, "provisioner not registered", http.StatusForbidden)
		return
	}
	s.requeueTimedOut()
	q := s.queues[ids["tenantId"]]
	if len(q) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	t := q[0]
	s.queues[ids["tenantId"]] = q[1:]
	t.owner = ids["provisionerId"] + "." + ids["workerId"]
	t.takenAt = time.Now()
	s.inProgress[t.id] = t
	s.takes[t.id]++
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(t.body)
}

// SetTaskTimeout changes TaskTimeout while the server serves. Tests that
// need one timeout (a lost take, a killed provisioner) turn it off again
// once the task is handed out anew, so a slow run on a loaded machine is
// not timed out a second time.
func (s *Server) SetTaskTimeout(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.TaskTimeout = d
}

// requeueTimedOut puts tasks in progress past TaskTimeout back in their
// queue (their late finish then gets 417). Called with s.mu held.
func (s *Server) requeueTimedOut() {
	if s.TaskTimeout <= 0 {
		return
	}
	for id, t := range s.inProgress {
		if time.Since(t.takenAt) > s.TaskTimeout {
			delete(s.inProgress, id)
			t.owner = ""
			s.queues[t.tenant] = append(s.queues[t.tenant], t)
		}
	}
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request) {
	m, ok := readObject(w, r)
	if !ok {
		return
	}
	ids, ok := nonEmpty(m, "provisionerId", "workerId", "tenantId", "taskId")
	if !ok {
		http.Error(w, "workerId, provisionerId, tenantId and taskId are required", http.StatusBadRequest)
		return
	}
	status, isNum := m["status"].(json.Number)
	code, err := strconv.Atoi(status.String())
	if !isNum || err != nil {
		http.Error(w, "status must be an integer", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.provisioners[ids["provisionerId"]]; !known {
		http.Error(w, "provisioner not registered", http.StatusForbidden)
		return
	}
	s.requeueTimedOut()
	t, inProgress := s.inProgress[ids["taskId"]]
	if !inProgress || t.owner != ids["provisionerId"]+"."+ids["workerId"] {
		http.Error(w, "not the owner of task "+ids["taskId"], http.StatusExpectationFailed)
		return
	}
	delete(s.inProgress, t.id)
	s.finishes = append(s.finishes, Finish{TaskID: t.id, ProvisionerID: ids["provisionerId"], WorkerID: ids["workerId"],
		TenantID: ids["tenantId"], Status: code, Body: m})
}

func (s *Server) putPlugin(w http.ResponseWriter, r *http.Request, family, name string) {
	if r.Header.Get("Coopr-UserID") == "" || r.Header.Get("Coopr-TenantID") != "superadmin" {
		http.Error(w, "plugin types are registered as Coopr-UserID admin, Coopr-TenantID superadmin", http.StatusForbidden)
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		http.Error(w, "invalid JSON", http.StatusBadRequest)
		return
	}
	if n, _ := m["name"].(string); n != name {
		http.Error(w, "the body's name must match the path", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plugins[family+"/"+name] = b
}

func (s *Server) resource(w http.ResponseWriter, r *http.Request, parts []string) {
	if _, err := strconv.Atoi(parts[8]); err != nil {
		http.Error(w, "version must be an integer", http.StatusBadRequest)
		return
	}
	if r.Header.Get("Coopr-TenantID") != parts[2] {
		http.Error(w, "Coopr-TenantID must name the tenant", http.StatusForbidden)
		return
	}
	s.mu.Lock()
	b, ok := s.resources[r.URL.Path]
	s.mu.Unlock()
	if !ok {
		http.Error(w, "no such resource", http.StatusNotFound)
		return
	}
	_, _ = w.Write(b)
}

// PutTenant calls the provisioner's PUT /v2/tenants/{id} as the Java
// server does (HttpProvisionerRequestService.putTenant: 2 attempts 500 ms
// apart, 10 s timeouts, any 2xx is success), and returns the answer.
func PutTenant(ctx context.Context, provisionerURL, tenant string, workers int, resources map[string]any) ([]byte, error) {
	body := map[string]any{"workers": workers}
	if resources != nil {
		body["resources"] = resources
	}
	b, _ := json.Marshal(body)
	return call(ctx, http.MethodPut, provisionerURL+"/v2/tenants/"+tenant, b)
}

// DeleteTenant calls the provisioner's DELETE /v2/tenants/{id}.
func DeleteTenant(ctx context.Context, provisionerURL, tenant string) ([]byte, error) {
	return call(ctx, http.MethodDelete, provisionerURL+"/v2/tenants/"+tenant, nil)
}

func call(ctx context.Context, method, url string, body []byte) ([]byte, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	var last error
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return b, nil
		}
		last = fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil, errors.Join(errors.New("coopfake: the provisioner refused (the server would now delete it)"), last)
}

// PendingFaults is how many faults on path have not met a request yet
// (a fault with Delay stops being pending when it starts holding one).
func (s *Server) PendingFaults(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		if strings.HasPrefix(path, f.Path) {
			n++
		}
	}
	return n
}

// ConsumeFault removes one pending application of the first fault on path;
// false when none is left.
func (s *Server) ConsumeFault(path string) bool { return s.fault(path) != nil }
