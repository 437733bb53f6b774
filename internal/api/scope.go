package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tokens"
	"github.com/loomrt/loom/runtime"
)

// Who may do what (docs/api.md, "Authentication"): every request carries
// a token of the daemon's tokens.Set (none needed when it holds none);
// read-only tokens only read; metrics and pprof need an admin token; a
// tenant token reaches only its tenant's tasks, calls and clusters, and
// another tenant's is answered 404, as if it did not exist, so a tenant
// cannot even learn which ids other tenants use.
//
// Handlers check scope with one call each: tenantOK for a task record,
// clusterOK for a cluster, submitTenant for a body that names a tenant.

// auth finds the request's token and puts it in the request's context.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := path.Clean(r.URL.Path); s.cfg.UI != nil && (p == "/ui" || strings.HasPrefix(p, "/ui/")) {
			// The console signs people in with a token and keeps them
			// in a session cookie; it checks that itself.
			next.ServeHTTP(w, r)
			return
		}
		if s.tokens.Open() {
			next.ServeHTTP(w, r.WithContext(tokens.NewContext(r.Context(), tokens.Anonymous)))
			return
		}
		secret, sent := tokens.Bearer(r)
		tok, ok := s.tokens.Check(secret)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="loomd"`)
			msg := "missing bearer token: send the header \"Authorization: Bearer <token>\" (loomd --token, LOOM_TOKEN or a token of --tokens-file)"
			if sent {
				msg = "wrong bearer token: use the token loomd was started with (--token / LOOM_TOKEN) or one of its --tokens-file"
			}
			writeError(w, http.StatusUnauthorized, msg)
			return
		}
		if tok.ReadOnly && r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s may only read (GET): %s %s changes something", tok, r.Method, r.URL.Path))
			return
		}
		next.ServeHTTP(w, r.WithContext(tokens.NewContext(r.Context(), tok)))
	})
}

// tokenOf is the request's token (Anonymous outside auth, in tests of a
// handler alone).
func tokenOf(r *http.Request) tokens.Token {
	if t, ok := tokens.FromContext(r.Context()); ok {
		return t
	}
	return tokens.Anonymous
}

// adminOnly wraps a handler of the daemon's own endpoints (metrics,
// pprof): a tenant token gets 403.
func adminOnly(what string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if tok := tokenOf(r); !tok.Admin() {
			writeError(w, http.StatusForbidden, fmt.Sprintf("%s needs an admin token; %s reaches only its tenant's tasks, calls and clusters", what, tok))
			return
		}
		h(w, r)
	}
}

// tenantOK reports whether the request's token reaches a task record;
// otherwise it has answered 404, the answer for a task that does not
// exist.
func (s *Server) tenantOK(w http.ResponseWriter, r *http.Request, rec queue.Record) bool {
	if tokenOf(r).SeesTenant(rec.TenantID, s.cfg.DefaultTenant) {
		return true
	}
	s.queueError(w, queue.ErrNotFound, rec.TaskID)
	return false
}

// taskOK reads a task's record and reports whether the request's token
// reaches it; otherwise it has answered (404 for another tenant's task).
// Admin tokens skip the read.
func (s *Server) taskOK(w http.ResponseWriter, r *http.Request, id string) bool {
	if tokenOf(r).Admin() {
		return true
	}
	rec, err := s.cfg.Queue.Get(r.Context(), id)
	if err != nil {
		s.queueError(w, err, id)
		return false
	}
	return s.tenantOK(w, r, rec)
}

// submitTenant checks the tenant a submitted task or call names against
// the request's token, and returns the tenant to give it: a tenant
// token's own when the body names none. A body naming another tenant is
// answered 403 (ok false).
func (s *Server) submitTenant(w http.ResponseWriter, r *http.Request, named, what string) (tenant string, ok bool) {
	tok := tokenOf(r)
	switch {
	case tok.Admin():
		return named, true
	case named == "":
		return tok.Tenant, true
	case named == tok.Tenant:
		return named, true
	}
	writeError(w, http.StatusForbidden, fmt.Sprintf("%s may submit only %s of tenant %s, not of tenant %s (leave tenantId out to use its own)", tok, what, tok.Tenant, named))
	return "", false
}

// scopeTask puts a submitted task in the token's tenant: it is answered
// 403 when it names another tenant; a task without tenantId gets the
// token's. Bodies that do not parse pass unchanged (the queue answers
// 400 with what is wrong).
func (s *Server) scopeTask(w http.ResponseWriter, r *http.Request, body []byte) ([]byte, bool) {
	if tokenOf(r).Admin() {
		return body, true
	}
	t, err := runtime.ParseTask(body)
	if err != nil {
		return body, true
	}
	tenant, ok := s.submitTenant(w, r, t.TenantID, "tasks")
	if !ok {
		return nil, false
	}
	if t.TenantID == "" {
		if body, err = runtime.WithTenant(body, tenant); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return nil, false
		}
	}
	return body, true
}

// clusterTenant is the tenant of a cluster: its state's, else (a new
// cluster whose first job has not made its state yet) its job request's.
// exists is false when neither is there.
func (s *Server) clusterTenant(ctx context.Context, name string) (tenant string, exists bool, err error) {
	st, err := s.clusterStore(ctx)
	if err != nil {
		return "", false, err
	}
	c, err := st.Get(name)
	switch {
	case err == nil:
		return c.Tenant, true, nil
	case !errors.Is(err, state.ErrNotFound):
		return "", false, err
	}
	if jobs := s.clusterJobs(); jobs != nil {
		rec, err := jobs.Job(ctx, name)
		if err == nil {
			return rec.Request.Tenant, true, nil
		}
	}
	return "", false, nil
}

// clusterOK reports whether the request's token reaches cluster name;
// otherwise it has answered (404 for another tenant's cluster, as for one
// that does not exist). A cluster that does not exist yet is anyone's to
// create. Admin tokens skip the read.
func (s *Server) clusterOK(w http.ResponseWriter, r *http.Request, name string) bool {
	tok := tokenOf(r)
	if tok.Admin() {
		return true
	}
	tenant, exists, err := s.clusterTenant(r.Context(), name)
	if err != nil {
		clusterErr(w, err)
		return false
	}
	if !exists || tok.SeesTenant(tenant, s.cfg.DefaultTenant) {
		return true
	}
	clusterErr(w, fmt.Errorf("cluster %s: %w", name, state.ErrNotFound))
	return false
}
