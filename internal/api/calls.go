package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/runtime"
)

// submitCall queues a call of a hook of a called kind (POST /v1/calls)
// as a CALL task: the same queue, records, workers and GET /v1/tasks/{id}
// as Coopr tasks. The body is a runtime.CallRequest; "kind" may be left
// out when this daemon loads the type.
func (s *Server) submitCall(w http.ResponseWriter, r *http.Request) {
	sw, ok := parseWait(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r, "call")
	if !ok {
		return
	}
	c, err := runtime.ParseCall(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if c.TenantID, ok = s.submitTenant(w, r, c.TenantID, "calls"); !ok {
		return
	}
	kind := c.Kind
	if s.cfg.Plugins != nil {
		for _, t := range s.cfg.Plugins.Types() {
			if t.Name != c.Type {
				continue
			}
			if t.Coopr {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is a %s type, whose hooks run from Coopr tasks: POST the task to /v1/tasks", c.Type, t.Family))
				return
			}
			if kind != "" && kind != t.Family {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("kind %q does not match type %q, which is a %s type", kind, c.Type, t.Family))
				return
			}
			kind = t.Family
		}
		if checker, ok := s.cfg.Plugins.(interface {
			CheckCall(*runtime.CallRequest) error
		}); ok && kind != "" {
			if err := checker.CheckCall(c); err != nil && !errors.Is(err, runtime.ErrPluginNotFound) {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
	}
	if kind == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("this daemon does not load type %q, so its kind is unknown: load the plugin, or name the kind (\"kind\": \"clusterdriver\", ...)", c.Type))
		return
	}
	if c.CallID == "" {
		c.CallID = queue.NewID()
	}
	task, err := runtime.CallTask(kind, c)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.enqueue(w, r, task, sw)
}
