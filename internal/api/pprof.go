package api

import (
	"net/http"
	"net/http/pprof"
)

// pprof serves the Go profiler when Config.Pprof is on, and a 404 that
// says how to turn it on otherwise. /debug/pprof/cmdline is left out: the
// command line may hold tokens given as flags.
func (s *Server) pprof() http.HandlerFunc {
	if !s.cfg.Pprof {
		return func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotFound, "the profiler is off: start loomd serve with --pprof to serve "+r.URL.Path+" (see docs/operations.md, Profiling)")
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also every named profile: heap, goroutine, allocs, block, mutex...
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "/debug/pprof/cmdline is not served: the command line may hold tokens")
	})
	return mux.ServeHTTP
}
