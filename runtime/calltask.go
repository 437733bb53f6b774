package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
)

// CallTaskName is the taskName of a task that carries a call: how a hook
// of a called kind travels through the queue (POST /v1/calls), with the
// same durability, records and workers as Coopr tasks.
//
//	{"taskId": "c-1", "taskName": "CALL", "tenantId": "acme",
//	 "call": {"kind": "clusterdriver", "type": "gkelike", "hook": "create", "input": {...}}}
const CallTaskName = "CALL"

// callTask is a CALL task's call, checked against its kind.
type callTask struct {
	kind *Kind
	req  CallRequest
}

// CallTask returns the task JSON of a call of a plugin type of kind: the
// body the API queues for POST /v1/calls.
func CallTask(kind Family, c *CallRequest) ([]byte, error) {
	type callWire struct {
		Kind  Family          `json:"kind"`
		Type  string          `json:"type"`
		Hook  string          `json:"hook"`
		Input json.RawMessage `json:"input,omitempty"`
	}
	w := struct {
		TaskID   string   `json:"taskId,omitempty"`
		TaskName string   `json:"taskName"`
		TenantID string   `json:"tenantId,omitempty"`
		Call     callWire `json:"call"`
	}{c.CallID, CallTaskName, c.TenantID, callWire{kind, c.Type, c.Hook, c.Input}}
	if len(bytes.TrimSpace(w.Call.Input)) == 0 {
		w.Call.Input = nil
	}
	return json.Marshal(w)
}

// parseCallTask completes ParseTask for a CALL task: the kind must be a
// called kind, the hook one of its hooks and the input match the hook's
// input shape, so a bad call is refused when it is submitted.
func parseCallTask(t *Task, data []byte) (*Task, error) {
	var w struct {
		Call *struct {
			Kind  Family          `json:"kind"`
			Type  string          `json:"type"`
			Hook  string          `json:"hook"`
			Input json.RawMessage `json:"input"`
		} `json:"call"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidTask, describeJSONError(data, err))
	}
	t.TaskName = CallTaskName
	if t.TenantID != "" && !ValidTenant(t.TenantID) {
		return nil, fmt.Errorf("%w: task %s: tenantId %q must be %s", ErrInvalidTask, t.label(), t.TenantID, tenantRule)
	}
	c := w.Call
	if c == nil {
		return nil, fmt.Errorf("%w: CALL task %s has no \"call\" object ({\"kind\", \"type\", \"hook\", \"input\"})", ErrInvalidTask, t.label())
	}
	k := KindOf(c.Kind)
	if k == nil || k.Coopr {
		var called []string
		for _, k := range kindTable {
			if !k.Coopr {
				called = append(called, string(k.Family))
			}
		}
		return nil, fmt.Errorf("%w: CALL task %s: call.kind %q is not a called kind (want one of %s)", ErrInvalidTask, t.label(), c.Kind, strings.Join(called, ", "))
	}
	if c.Type == "" {
		return nil, fmt.Errorf("%w: CALL task %s: missing call.type", ErrInvalidTask, t.label())
	}
	h := k.Hook(c.Hook)
	if h == nil {
		return nil, fmt.Errorf("%w: CALL task %s: %s has no hook %q (hooks: %s)", ErrInvalidTask, t.label(), k.Family, c.Hook, strings.Join(k.HookNames(), ", "))
	}
	if _, err := checkInput(h, c.Input); err != nil {
		return nil, fmt.Errorf("%w: CALL task %s: %s %s: %v (docs/kinds/%s.md)", ErrInvalidTask, t.label(), c.Type, c.Hook, err, k.Family)
	}
	t.call = &callTask{kind: k, req: CallRequest{CallID: t.TaskID, TenantID: t.TenantID, Type: c.Type, Hook: c.Hook, Input: c.Input}}
	return t, nil
}

// Call returns a CALL task's call request and its kind's family; ok is
// false for Coopr tasks.
func (t *Task) Call() (req CallRequest, kind Family, ok bool) {
	if t.call == nil {
		return CallRequest{}, "", false
	}
	return t.call.req, t.call.kind.Family, true
}

// runCallTask runs a CALL task and folds the call's result into a Result,
// whose JSON is the call result: status, message, stderr, error {class,
// reason, code, message}, and kind, type, hook, result and defaulted.
func (rt *Runtime) runCallTask(ctx context.Context, task *Task, logger *slog.Logger) (*Result, error) {
	if pt, ok := rt.snap.Load().types[task.call.req.Type]; ok && pt.family != task.call.kind.Family {
		return nil, fmt.Errorf("%w: CALL task %s is for a %s, but %q is a %s type (%s)",
			ErrPluginNotFound, task.label(), task.call.kind.Family, pt.name, pt.family, pt.plugin.defFile)
	}
	req := task.call.req
	cr, err := rt.callWith(ctx, &req, logger)
	if err != nil {
		return nil, err
	}
	res := &Result{TaskID: task.TaskID, TenantID: cr.TenantID, Status: cr.Status, Message: cr.Message, Stderr: cr.Stderr,
		DurationMS: cr.DurationMS, Plugin: cr.Plugin,
		Extra: map[string]any{"kind": string(cr.Kind), "type": cr.Type, "hook": cr.Hook}}
	if cr.Result != nil {
		// "result" is the hook's value, of any JSON type: kept in Extra,
		// which MarshalJSON writes at the top level.
		res.Extra["result"] = cr.Result
	}
	if cr.Defaulted {
		res.Extra["defaulted"] = true
	}
	if e := cr.Error; e != nil {
		res.Error = map[string]any{"class": e.Class, "message": e.Message}
		if e.Reason != "" {
			res.Error["reason"] = e.Reason
		}
		if e.Code != 0 {
			res.Error["code"] = e.Code
		}
		if e.Reason == ReasonTimeout {
			res.Error["kind"] = "timeout"
		}
	}
	return res, nil
}

// checkInput decodes a call's input ({} when absent) and checks it
// against the hook's input shape.
func checkInput(h *Hook, input json.RawMessage) (map[string]any, error) {
	var in any = map[string]any{}
	if trimmed := bytes.TrimSpace(input); len(trimmed) > 0 && string(trimmed) != "null" {
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, fmt.Errorf("input: %s", describeJSONError(input, err))
		}
	}
	checked, err := h.Input.Check(in, "input")
	if err != nil {
		return nil, err
	}
	m, _ := checked.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}
