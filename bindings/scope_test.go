package bindings

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestScope(t *testing.T) {
	s := NewScope("t1", TaskLimits{Conns: 2, Descriptors: 3})
	var order []string
	hold := func(r Resource, what string) (func(), error) {
		return s.Hold(r, what, func() { order = append(order, what) })
	}
	relA, err := hold(Conn, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold(Conn, "b"); err != nil {
		t.Fatal(err)
	}
	var be *Error
	if _, err := hold(Conn, "c"); !errors.As(err, &be) || be.Kind != "limit" || !strings.Contains(be.Message, "2 connections, the limit per task") {
		t.Fatalf("third connection: %v", err)
	}
	if _, err := hold(File, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := hold(File, "g"); !errors.As(err, &be) || be.Kind != "limit" || !strings.Contains(be.Message, "3 descriptors") {
		t.Fatalf("fourth descriptor: %v", err)
	}
	relA()
	relA() // released once
	if c, d := s.Held(); c != 1 || d != 2 || !slices.Equal(order, []string{"a"}) {
		t.Fatalf("after a release: %d conns, %d descriptors, released %v", c, d, order)
	}
	if released := s.Close(); !slices.Equal(released, []string{"f", "b"}) || !slices.Equal(order, []string{"a", "f", "b"}) {
		t.Fatalf("Close released %v (order %v), want the newest first", released, order)
	}
	if !s.Closed() || s.Close() != nil {
		t.Fatal("a closed scope")
	}
	if _, err := hold(Conn, "late"); !errors.As(err, &be) || be.Kind != "config" || !strings.Contains(be.Message, "has ended") {
		t.Fatalf("Hold after Close: %v", err)
	}
	var nilScope *Scope
	if nilScope.Closed() {
		t.Fatal("a nil scope is never closed")
	}
}
