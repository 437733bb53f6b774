// Package fakehttp holds what the cloud fakes share to record their
// exchanges and to lose answers on purpose.
package fakehttp

import (
	"net"
	"net/http"
)

// Recorder is a ResponseWriter that keeps the status and body it passes
// on, for a fake's exchange log.
type Recorder struct {
	http.ResponseWriter
	Status int
	Body   []byte
}

// WriteHeader implements http.ResponseWriter.
func (r *Recorder) WriteHeader(s int) { r.Status = s; r.ResponseWriter.WriteHeader(s) }

// Write implements http.ResponseWriter.
func (r *Recorder) Write(b []byte) (int, error) {
	if r.Status == 0 {
		r.Status = 200
	}
	r.Body = append(r.Body, b...)
	return r.ResponseWriter.Write(b)
}

// Discard is a ResponseWriter that keeps nothing: an answer never sent.
type Discard struct{ H http.Header }

// Header implements http.ResponseWriter.
func (d Discard) Header() http.Header { return d.H }

// Write implements http.ResponseWriter.
func (d Discard) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader implements http.ResponseWriter.
func (d Discard) WriteHeader(int) {}

// DropConn closes the request's connection without an answer (a reset:
// linger 0), as a lost answer looks to the client.
func DropConn(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
