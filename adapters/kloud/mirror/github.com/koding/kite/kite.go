// Package kite mirrors the two types of github.com/koding/kite that
// kloud's provider API exposes (Koding vendors kite at
// go/src/vendor/github.com/koding/kite; mirror of koding/koding 74c20cb0).
package kite

// Request mirrors kite.Request (request.go): the fields kloud's providers
// read.
type Request struct {
	// ID is a unique string, which may be used for tracing the request.
	ID string
	// Method is the kite method invoked ("apply", "bootstrap" ...).
	Method string
	// Username is the user the request is bound to.
	Username string
}

// Error mirrors kite.Error (errors.go): the error a kite method returns
// to its caller with a code.
type Error struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	CodeVal   string `json:"code"`
	RequestID string `json:"id"`
}

// Code returns the error's code.
func (e Error) Code() string { return e.CodeVal }

// Error is the message, prefixed with the type unless it is generic.
func (e Error) Error() string {
	s := e.Message
	if e.Type != "genericError" && e.Type != "" {
		s = e.Type + ": " + e.Message
	}
	if e.RequestID != "" {
		return s + " (" + e.RequestID + ")"
	}
	return s
}
