package coopr

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/loomrt/loom/runtime"
)

// handler serves the provisioner API the Coopr server calls (§2.2):
// GET /status, GET /heartbeat, POST /v2/tenants, PUT and DELETE
// /v2/tenants/{id}, and the server's unused client calls PUT
// /v2/tenants/{id}/workers and /resources.
func (p *Provisioner) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		p.mu.Lock()
		ok := p.registered
		p.mu.Unlock()
		if ok {
			fmt.Fprint(w, "OK")
		} else {
			fmt.Fprint(w, "STARTING")
		}
	})
	mux.HandleFunc("GET /heartbeat", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"usage": p.usage()})
	})
	mux.HandleFunc("POST /v2/tenants", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readTenant(w, r)
		if !ok {
			return
		}
		id, _ := body["id"].(string)
		p.putTenant(w, id, body)
	})
	mux.HandleFunc("PUT /v2/tenants/{id}", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readTenant(w, r)
		if !ok {
			return
		}
		p.putTenant(w, r.PathValue("id"), body)
	})
	mux.HandleFunc("PUT /v2/tenants/{id}/workers", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readTenant(w, r)
		if !ok {
			return
		}
		id := r.PathValue("id")
		p.mu.Lock()
		if t, known := p.tenants[id]; known && t.resources != nil {
			body["resources"] = t.resources
		}
		p.mu.Unlock()
		p.putTenant(w, id, body)
	})
	mux.HandleFunc("PUT /v2/tenants/{id}/resources", func(w http.ResponseWriter, r *http.Request) {
		body, ok := readTenant(w, r)
		if !ok {
			return
		}
		id := r.PathValue("id")
		p.mu.Lock()
		workers := 0
		if t, known := p.tenants[id]; known {
			workers = t.workers
		}
		p.mu.Unlock()
		body["workers"] = json.Number(fmt.Sprint(workers))
		p.putTenant(w, id, body)
	})
	mux.HandleFunc("DELETE /v2/tenants/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !p.deleteTenant(r.PathValue("id")) {
			http.Error(w, "tenant "+r.PathValue("id")+" not found on this provisioner", http.StatusNotFound)
			return
		}
		p.log.Info("coopr: tenant deleted; its workers stop after their current task", "tenant", r.PathValue("id"))
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "OK")
	})
	return mux
}

func readTenant(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		http.Error(w, "the body must be a JSON object {\"workers\": N, \"resources\": {...}}", http.StatusBadRequest)
		return nil, false
	}
	return m, true
}

// putTenant applies a tenant body and answers it echoed with "status": 0,
// as Coopr's provisioner did. Bad input gets 400 and what is wrong
// (Coopr answered 500 with an empty body).
func (p *Provisioner) putTenant(w http.ResponseWriter, id string, body map[string]any) {
	if !runtime.ValidTenant(id) {
		http.Error(w, fmt.Sprintf("tenant id %q: want 1 to 64 letters, digits, '.', '_' or '-'", id), http.StatusBadRequest)
		return
	}
	workers := 0
	if v, ok := body["workers"]; ok && v != nil {
		n, isNum := v.(json.Number)
		i, err := n.Int64()
		if !isNum || err != nil || i < 0 {
			http.Error(w, "workers must be a non-negative integer", http.StatusBadRequest)
			return
		}
		workers = int(i)
	}
	var resources json.RawMessage
	if v, ok := body["resources"]; ok && v != nil {
		if _, isObj := v.(map[string]any); !isObj {
			http.Error(w, "resources must be an object {\"automatortypes\": {...}, \"providertypes\": {...}}", http.StatusBadRequest)
			return
		}
		resources, _ = json.Marshal(v)
	}
	// Each worker is a take loop: a count past the capacity this
	// provisioner registered would have loomd start as many as asked
	// (300,000 once grew it by 1.5 GB), and a Coopr server never assigns
	// more than capacityTotal. Checked and applied under one lock, so two
	// tenant calls at once cannot pass it together.
	if err := p.setTenantWithin(id, workers, resources); err != nil {
		p.log.Warn("coopr: refused a tenant's worker count over this provisioner's capacity", "tenant", id, "workers", workers, "err", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.log.Info("coopr: tenant set", "tenant", id, "workers", workers)
	body["status"] = 0
	writeJSON(w, http.StatusOK, body)
}

// totalWorkersLocked counts the workers of every tenant but one.
func (p *Provisioner) totalWorkersLocked(except string) int {
	n := 0
	for id, t := range p.tenants {
		if id != except {
			n += t.workers
		}
	}
	return n
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
