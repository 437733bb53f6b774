package plugtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/luaval"
	"github.com/loomrt/loom/runtime"
)

// pumpWhile runs fn, which runs a hook on the test's VM (nested in the
// test's call, see gate.go), on another goroutine while serving the
// fakes' Lua handlers on this one, on the handlers' thread of the same
// VM. An assertion (or error) in a handler fails the test where it was
// raised.
func (f *fileRun) pumpWhile(L *lua.LState, fn func()) {
	if handlerErr := f.serveWhile(fn); handlerErr != nil {
		L.Error(handlerErr, 0)
	}
}

// serveWhile is pumpWhile that returns a handler's error object instead
// of raising it.
func (f *fileRun) serveWhile(fn func()) lua.LValue {
	calls := f.pump.open()
	defer f.pump.close()
	g := f.gate
	g.mainHolds = false
	g.active.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer g.release()
		fn()
	}()
	var handlerErr lua.LValue
	hl := g.handlers
	for {
		select {
		case c := <-calls:
			serve := f.serveHandler
			if c.run != nil {
				serve = func(L *lua.LState, c *handlerCall) lua.LValue { return c.run(L) }
			}
			g.handler(func() {
				hl.SetContext(f.ctx)
				if obj := serve(hl, c); obj != nil && handlerErr == nil {
					handlerErr = obj
				}
			})
			continue
		case <-done:
		}
		break
	}
	g.active.Store(false)
	return handlerErr
}

// noteInterrupted keeps a hook stopped by the test's --timeout, so the
// failure names the hook's own line.
func (f *fileRun) noteInterrupted(err error) {
	var ce *runtime.CancelledError
	if errors.As(err, &ce) {
		f.interrupted = ce
	}
}

var callOptionNames = []string{"type", "id", "tenant"}

// call is loom.test.call(hook, input?, opts?): runs one hook of a called
// kind (cluster driver, bucket provisioner, ...) as loomd call does and
// returns the call result table ({status, result, error = {class, reason,
// message}, defaulted, ...}) and the hook's log lines. opts.type defaults
// to the first type of a called kind in the plugin.
func (f *fileRun) call(L *lua.LState) int {
	hook := L.CheckString(1)
	var input json.RawMessage
	if v := L.Get(2); v != lua.LNil {
		b, err := luaval.Encode(v, luaval.EncodeOptions{L: L})
		if err != nil {
			L.RaiseError("loom.test.call: the input does not convert to JSON: %v", err)
		}
		input = b
	}
	opts := optMap(L, 3)
	for k := range opts {
		if !contains(callOptionNames, k) {
			L.RaiseError("loom.test.call: unknown option %q%s: options are %s", k, runtime.DidYouMean(k, callOptionNames), strings.Join(callOptionNames, ", "))
		}
	}
	typ, _ := opts["type"].(string)
	if typ == "" {
		for _, t := range f.types {
			if !t.Coopr {
				typ = t.Name
				break
			}
		}
		if typ == "" {
			L.RaiseError("loom.test.call: %s declares no type of a called kind (clusterdrivers, bucketprovisioners, cloudproviders, kloudproviders): use loom.test.run for Coopr tasks", f.typ.Plugin)
		}
	}
	f.taskSeq++
	id := fmt.Sprintf("test-%d", f.taskSeq)
	if s, ok := opts["id"].(string); ok && s != "" {
		id = s
	}
	tenant, _ := opts["tenant"].(string)
	req := &runtime.CallRequest{CallID: id, TenantID: tenant, Type: typ, Hook: hook, Input: input}
	f.logs.mu.Lock()
	mark := len(f.logs.lines)
	f.logs.mu.Unlock()
	var res *runtime.CallResult
	var err error
	f.pumpWhile(L, func() { res, err = f.sess.CallNested(f.ctx, req, f.logger) })
	if err != nil {
		f.noteInterrupted(err)
		L.RaiseError("loom.test.call: %v", err)
	}
	f.logs.mu.Lock()
	var logs []string
	if mark <= len(f.logs.lines) {
		logs = append(logs, f.logs.lines[mark:]...)
	}
	line := fmt.Sprintf("loomd test: call %s %s -> status %d", typ, hook, res.Status)
	if res.Error != nil {
		line += fmt.Sprintf(" (%s %s): %s", res.Error.Class, res.Error.Reason, res.Message)
	}
	f.logs.lines = append(f.logs.lines, line)
	f.logs.mu.Unlock()
	b, _ := json.Marshal(res)
	var m any
	_ = json.Unmarshal(b, &m)
	L.Push(luaval.FromGo(L, m))
	L.Push(stringList(L, logs))
	return 2
}
