// Package bindingstest is a small harness for testing a binding without
// the runtime: a Host backed by temp dirs and a log buffer, and a Lua state
// whose require() reaches only the bindings under test.
//
// Plugins and the runtime's own tests use runtime/luatest instead, which
// runs the real sandbox.
package bindingstest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/redact"
)

// Host is a bindings.Host for tests. Its fields may be set before use.
type Host struct {
	Ctx  context.Context
	Dir  string // plugin dir
	Work string // hook work dir
	// Granted are the other plugins' files the test's task names.
	Granted []bindings.Grant
	Perms   bindings.Permissions
	Task    string
	// Sensitive are the task's sensitive fields, for bindings that take
	// a secret by reference (bindings.SensitiveFields).
	Sensitive map[string]string
	// Scope, when set, is the task's scope (bindings.Scoped); close it to
	// end the task.
	Scope   *bindings.Scope
	mu      sync.Mutex
	secrets []string
	logBuf  bytes.Buffer
	logger  *slog.Logger
}

// NewHost returns a Host whose dirs are fresh temp dirs and whose logger
// writes JSON lines to an in-memory buffer (see Logs).
func NewHost(t testing.TB) *Host {
	t.Helper()
	h := &Host{Ctx: context.Background(), Dir: t.TempDir(), Work: t.TempDir(), Task: "test-task"}
	h.logger = slog.New(slog.NewJSONHandler(&lockedWriter{h: h}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return h
}

type lockedWriter struct{ h *Host }

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	return w.h.logBuf.Write(p)
}

// Context implements bindings.Host.
func (h *Host) Context() context.Context { return h.Ctx }

// Logger implements bindings.Host.
func (h *Host) Logger() *slog.Logger { return h.logger }

// PluginDir implements bindings.Host.
func (h *Host) PluginDir() string { return h.Dir }

// WorkDir implements bindings.Host.
func (h *Host) WorkDir() string { return h.Work }

// Grants implements bindings.Host.
func (h *Host) Grants() []bindings.Grant { return h.Granted }

// Permissions implements bindings.Host.
func (h *Host) Permissions() bindings.Permissions { return h.Perms }

// SensitiveField implements bindings.SensitiveFields.
func (h *Host) SensitiveField(name string) (string, bool) {
	v, ok := h.Sensitive[name]
	return v, ok
}

// TaskScope implements bindings.Scoped.
func (h *Host) TaskScope() *bindings.Scope { return h.Scope }

// TaskID implements bindings.Host.
func (h *Host) TaskID() string { return h.Task }

// AddSecret implements bindings.Host. Secrets are recorded so tests can
// check that a binding registered them (see Secrets).
func (h *Host) AddSecret(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.secrets = append(h.secrets, s)
}

// Redact implements bindings.Host: the registered secrets are replaced in
// every encoding, as the runtime does.
func (h *Host) Redact(s string) string {
	set := redact.New()
	for _, x := range h.Secrets() {
		set.Add(x)
	}
	return set.String(s)
}

// Secrets returns the values registered with AddSecret.
func (h *Host) Secrets() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.secrets...)
}

// Logs returns everything logged so far (JSON lines). Unlike the runtime's
// logger, this one does not redact: tests check that bindings never pass
// secrets to the logger in the first place.
func (h *Host) Logs() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.logBuf.String()
}

// NewState returns a Lua state with the base libraries and a require()
// that resolves "loom.<name>" to the given bindings, opened against h.
func NewState(t testing.TB, h bindings.Host, bs ...bindings.Binding) *lua.LState {
	t.Helper()
	L := lua.NewState()
	t.Cleanup(L.Close)
	reg := bindings.NewRegistry(bs...)
	loaded := L.NewTable()
	L.SetGlobal("require", L.NewFunction(func(L *lua.LState) int {
		name := L.CheckString(1)
		if v := loaded.RawGetString(name); v != lua.LNil {
			L.Push(v)
			return 1
		}
		mod, ok := strings.CutPrefix(name, "loom.")
		b, found := reg.Lookup(mod)
		if !ok || !found {
			L.RaiseError("module %q not found", name)
		}
		v := b.Open(L, h)
		loaded.RawSetString(name, v)
		L.Push(v)
		return 1
	}))
	return L
}

// Run executes a Lua chunk in L and fails the test on error.
func Run(t testing.TB, L *lua.LState, code string) {
	t.Helper()
	if err := L.DoString(code); err != nil {
		t.Fatalf("lua: %v", err)
	}
}

// ErrorMessage returns the message of a Lua error: the message field of a
// binding's error table, or the error text otherwise.
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	var ae *lua.ApiError
	if errors.As(err, &ae) {
		if t, ok := ae.Object.(*lua.LTable); ok {
			kind, _ := t.RawGetString("kind").(lua.LString)
			msg, _ := t.RawGetString("message").(lua.LString)
			return string(kind) + ": " + string(msg)
		}
	}
	return err.Error()
}
