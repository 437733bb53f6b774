// Package machinestate mirrors koding/kites/kloud/machinestate
// (machinestate/machinestate.go at koding/koding 74c20cb0): the state of
// a machine as kloud stores and reports it.
package machinestate

import (
	"fmt"
	"strings"
)

// State is a machine's state.
type State int

// The states, in kloud's order (their numbers are stored).
const (
	Unknown State = iota
	NotInitialized
	Building
	Starting
	Running
	Stopping
	Stopped
	Rebooting
	Terminating
	Terminated
	Snapshotting
	Pending
)

// States maps a state's name to the state.
var States = map[string]State{
	"NotInitialized": NotInitialized,
	"Building":       Building,
	"Starting":       Starting,
	"Running":        Running,
	"Stopping":       Stopping,
	"Stopped":        Stopped,
	"Rebooting":      Rebooting,
	"Terminating":    Terminating,
	"Terminated":     Terminated,
	"Snapshotting":   Snapshotting,
	"Pending":        Pending,
	"Unknown":        Unknown,
	"":               Unknown,
}

var names = func() map[State]string {
	m := make(map[State]string, len(States))
	for n, s := range States {
		if n != "" {
			m[s] = n
		}
	}
	return m
}()

// String is the state's name.
func (s State) String() string {
	if n, ok := names[s]; ok {
		return n
	}
	return "Unknown"
}

// MarshalJSON encodes the state as its name.
func (s State) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// UnmarshalJSON decodes a state's name.
func (s *State) UnmarshalJSON(d []byte) error {
	st, ok := States[strings.Trim(string(d), `"`)]
	if !ok {
		return fmt.Errorf("unknown value: %s", d)
	}
	*s = st
	return nil
}

// In reports whether s is one of states.
func (s State) In(states ...State) bool {
	for _, st := range states {
		if st == s {
			return true
		}
	}
	return false
}

// InProgress reports whether s is a transition (Building, Starting,
// Stopping, Terminating, Rebooting, Pending).
func (s State) InProgress() bool {
	return s.In(Building, Starting, Stopping, Terminating, Rebooting, Pending)
}
