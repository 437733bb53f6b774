package logstream

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/loomrt/loom/bindings/redact"
)

// TestClean: entries are redacted, then cut: a secret never survives in
// part, a huge line or attribute list is bounded.
func TestClean(t *testing.T) {
	set := redact.New()
	set.Add("hunter2-password")
	e := Clean(Entry{Msg: strings.Repeat("x", MaxMsg-5) + "hunter2-password", Attrs: []Attr{{K: "pw", V: "hunter2-password"}},
		Task: &TaskEvent{Message: "auth hunter2-password failed"}}, set)
	if strings.Contains(e.Msg, "hunter2") || strings.Contains(e.Attrs[0].V, "hunter2") || strings.Contains(e.Task.Message, "hunter2") {
		t.Errorf("a secret survived: %+v", e)
	}
	if len(e.Msg) > MaxMsg+64 || !strings.Contains(e.Msg, "bytes cut]") {
		t.Errorf("message not bounded: %d bytes", len(e.Msg))
	}
	var attrs []Attr
	for i := range 100 {
		attrs = append(attrs, Attr{K: "k", V: strings.Repeat("v", i*100)})
	}
	e = Clean(Entry{Attrs: attrs}, nil)
	if len(e.Attrs) != MaxAttrs+1 || e.Attrs[MaxAttrs].K != "attrs_dropped" || e.Attrs[MaxAttrs].V != "68" {
		t.Errorf("attributes not bounded: %d, last %+v", len(e.Attrs), e.Attrs[len(e.Attrs)-1])
	}
	for _, a := range e.Attrs {
		if len(a.V) > MaxAttrValue+64 {
			t.Errorf("attribute value of %d bytes", len(a.V))
		}
	}
}

// TestTee: a task tracked twice gets its lines at both destinations (the
// With attributes first), untracking one leaves the other, a grouped
// "task" attribute is not the task's, and every record reaches the
// daemon's handler whatever happens.
func TestTee(t *testing.T) {
	var daemon bytes.Buffer
	tee := NewTee()
	logger := slog.New(tee.Handler(slog.NewTextHandler(&daemon, nil)))
	var a, b []Entry
	stopA := tee.Track("t1", func(e Entry) { a = append(a, e) })
	stopB := tee.Track("t1", func(e Entry) {
		e.Attrs = append(e.Attrs, Attr{K: "b", V: "only"}) // must not show in a's copy
		b = append(b, e)
	})
	if !tee.Tracking("t1") || tee.Tracking("t2") {
		t.Fatal("Tracking")
	}
	logger.With("component", "worker", "task", "t1").Warn("disk slow", "took", 3)
	logger.Info("other", "task", "t2")
	logger.WithGroup("g").Info("grouped", "task", "t1")
	stopA()
	stopA() // twice is harmless
	logger.Info("second", "task", "t1")
	stopB()
	logger.Info("third", "task", "t1")
	if tee.Tracking("t1") {
		t.Error("still tracking after both stopped")
	}
	if len(a) != 1 || a[0].Msg != "disk slow" || a[0].Level != "WARN" || a[0].Attrs[0] != (Attr{"component", "worker"}) ||
		a[0].Attr("took") != "3" || a[0].Attr("b") != "" {
		t.Fatalf("a got %+v", a)
	}
	if len(b) != 2 || b[1].Msg != "second" {
		t.Fatalf("b got %+v", b)
	}
	for _, want := range []string{"disk slow", "other", "grouped", "second", "third"} {
		if !strings.Contains(daemon.String(), want) {
			t.Errorf("the daemon's log lacks %q", want)
		}
	}
}
