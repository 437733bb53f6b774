package runtime

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/luaval"
)

// Result is Coopr's result JSON, the body of /v2/tasks/finish without the
// worker identity fields. Loom's additions (duration_ms, plugin, error)
// use keys a Coopr server ignores.
type Result struct {
	TaskID string `json:"taskId,omitempty"`
	// TenantID is the tenant the task ran for (its tenantId, else the
	// runtime's), as in a Coopr worker's result.
	TenantID string `json:"tenantId,omitempty"`
	// ProvisionerID and WorkerID name who ran the task, as in a Coopr
	// worker's result (Options.ProvisionerID and WorkerID; a Coopr
	// server's take/finish loop sets the ids it took the task with).
	ProvisionerID string `json:"provisionerId,omitempty"`
	WorkerID      string `json:"workerId,omitempty"`
	// Status is 0 on success. Any other value is a failure; 201 and 202
	// mean "nothing was created" to a Coopr server.
	Status  int    `json:"status"`
	Message string `json:"message,omitempty"`
	Stdout  string `json:"stdout,omitempty"`
	Stderr  string `json:"stderr,omitempty"`
	// Result is the map later tasks for the node receive at the top level
	// of their config (providerid, ssh-auth, ssh_host_keys...).
	Result map[string]any `json:"result,omitempty"`
	// IPAddresses and Hostname are applied to the node on success.
	IPAddresses map[string]any `json:"ipaddresses,omitempty"`
	Hostname    string         `json:"hostname,omitempty"`
	// Error is a structured error the plugin raised with error({...}), or
	// a binding's error (kind, command, exit_code...), kept as data.
	Error map[string]any `json:"error,omitempty"`
	// Extra holds any other top-level keys the plugin set on self.result.
	Extra map[string]any `json:"-"`
	// DurationMS is how long the hook(s) ran.
	DurationMS float64 `json:"duration_ms"`
	// Plugin names the plugin type(s) and version(s) that ran the task.
	Plugin string `json:"plugin,omitempty"`
}

// MarshalJSON folds Extra into the top level.
func (r *Result) MarshalJSON() ([]byte, error) {
	type plain Result
	b, err := json.Marshal((*plain)(r))
	if err != nil || len(r.Extra) == 0 {
		return b, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range r.Extra {
		if _, taken := m[k]; !taken {
			m[k] = v
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON keeps unknown top-level keys in Extra.
func (r *Result) UnmarshalJSON(b []byte) error {
	type plain Result
	if err := json.Unmarshal(b, (*plain)(r)); err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for _, k := range []string{"taskId", "tenantId", "provisionerId", "workerId", "status", "message", "stdout", "stderr", "result", "ipaddresses", "hostname", "error", "duration_ms", "plugin"} {
		delete(m, k)
	}
	if len(m) > 0 {
		r.Extra = m
	}
	return nil
}

// newAutovivMeta returns the metatable that makes self.result behave like
// Ruby's auto-vivifying @result: reading a missing key creates, stores and
// returns a new auto-vivifying table.
func newAutovivMeta(L *lua.LState) *lua.LTable {
	mt := L.CreateTable(0, 2)
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		t := L.CheckTable(1)
		k := L.Get(2)
		if k == lua.LNil {
			return 0
		}
		child := L.CreateTable(0, 2)
		child.Metatable = mt
		t.RawSet(k, child)
		L.Push(child)
		return 1
	}))
	return mt
}

func (v *vm) newAutoviv() *lua.LTable {
	t := v.L.CreateTable(0, 4)
	t.Metatable = v.autoviv
	return t
}

func (v *vm) isAutoviv(t *lua.LTable) bool { return t.Metatable == v.autoviv }

// collectResult converts the instance's result table into r: status,
// message, stdout, stderr, result, ipaddresses, hostname and extras.
// Auto-vivified tables that stayed empty are dropped.
func (v *vm) collectResult(res lua.LValue, r *Result) error {
	t, ok := res.(*lua.LTable)
	if !ok {
		if res == lua.LNil {
			return nil
		}
		return fmt.Errorf("self.result must be a table, found %s", res.Type())
	}
	data, err := luaval.Encode(t, luaval.EncodeOptions{L: v.L, Omit: v.isAutoviv})
	if err != nil {
		return fmt.Errorf("self.result cannot be sent as JSON: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("self.result must be a table with string keys: %w", err)
	}
	if s, ok := m["status"]; ok {
		st, err := statusOf(s)
		if err != nil {
			return err
		}
		r.Status = st
	}
	take := func(key string, dst *string) error {
		val, ok := m[key]
		if !ok {
			return nil
		}
		switch x := val.(type) {
		case string:
			*dst = x
		case float64:
			*dst = strconv.FormatFloat(x, 'f', -1, 64)
		default:
			return fmt.Errorf("self.result.%s must be a string, found %T", key, val)
		}
		return nil
	}
	for key, dst := range map[string]*string{"message": &r.Message, "stdout": &r.Stdout, "stderr": &r.Stderr, "hostname": &r.Hostname} {
		if err := take(key, dst); err != nil {
			return err
		}
	}
	for key, dst := range map[string]*map[string]any{"result": &r.Result, "ipaddresses": &r.IPAddresses} {
		val, ok := m[key]
		if !ok {
			continue
		}
		mm, isMap := val.(map[string]any)
		if !isMap {
			if arr, isArr := val.([]any); isArr && len(arr) == 0 {
				continue
			}
			return fmt.Errorf("self.result.%s must be a table with string keys, found %s", key, jsonKind(val))
		}
		*dst = mm
	}
	for _, k := range []string{"status", "message", "stdout", "stderr", "hostname", "result", "ipaddresses", "taskId", "duration_ms"} {
		delete(m, k)
	}
	if len(m) > 0 {
		r.Extra = m
	}
	return nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}

// statusOf accepts an integer, or a string holding one (Ruby's worker sent
// the string '1'), and rejects anything else: a status of {} is what made
// Coopr servers reject finishes with 400.
func statusOf(v any) (int, error) {
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) {
			return 0, fmt.Errorf("self.result.status must be an integer, found %v", x)
		}
		return int(x), nil
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil {
			return 0, fmt.Errorf("self.result.status must be an integer, found the string %q", x)
		}
		return n, nil
	case bool:
		return 0, fmt.Errorf("self.result.status must be an integer, found a boolean")
	default:
		return 0, fmt.Errorf("self.result.status must be an integer, found %s", jsonKind(v))
	}
}

// describeLuaError extracts the message, the traceback and, for error
// tables, the structured value from a PCall error, without running any
// Lua (no __tostring): a hostile __tostring cannot hang the host.
func describeLuaError(err error) (msg, trace string, obj *lua.LTable) {
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		return err.Error(), "", nil
	}
	trace = ae.StackTrace
	switch o := ae.Object.(type) {
	case lua.LString:
		msg = string(o)
	case *lua.LTable:
		obj = o
		if m, ok := o.RawGetString("message").(lua.LString); ok {
			msg = string(m)
		} else if m, ok := o.RawGetInt(1).(lua.LString); ok {
			msg = string(m)
		} else {
			msg = "plugin raised an error table without a message field"
		}
	case nil:
		msg = ae.Error()
	default:
		if o == lua.LNil {
			msg = "plugin raised error(nil)"
		} else {
			msg = o.String()
		}
	}
	switch {
	case strings.Contains(msg, "callstack overflow") || strings.Contains(msg, "stack overflow"):
		msg = "stack overflow: recursion too deep (" + msg + ")"
	case strings.Contains(msg, "registry overflow"):
		msg = "out of Lua stack space: too many values at once (" + msg + ")"
	case ae.Type == lua.ApiErrorPanic:
		msg = "internal error in a Go binding (recovered): " + msg
	}
	return strings.TrimSpace(msg), trace, obj
}

var luaLocRe = regexp.MustCompile(`^([^\s:]+\.lua):(\d+):`)

// luaLocation finds "file.lua:N:" at the start of a Lua error message.
func luaLocation(msg string) (string, int) {
	m := luaLocRe.FindStringSubmatch(msg)
	if m == nil {
		return "", 0
	}
	n, _ := strconv.Atoi(m[2])
	return m[1], n
}
