package plugtest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/runtime"

	"github.com/loomrt/loom/bindings/luaval"
)

const fakeTypeName = "loom.test.http_fake"

var fakeOptionNames = []string{"host", "hosts", "permit", "strict", "routes"}

// newHTTPFake is loom.test.http{host = "api.example.com", routes = {...}}.
func (f *fileRun) newHTTPFake(L *lua.LState) int {
	opts := L.OptTable(1, L.CreateTable(0, 0))
	var hosts []string
	permit, strict := false, true
	var routes *lua.LTable
	for _, k := range fakeKeys(opts) {
		v := opts.RawGetString(k)
		switch k {
		case "host":
			s, ok := v.(lua.LString)
			if !ok {
				L.ArgError(1, "host must be a string such as \"api.example.com\"")
			}
			hosts = append(hosts, strings.ToLower(string(s)))
		case "hosts":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "hosts must be a list of host names")
			}
			t.ForEach(func(_, h lua.LValue) { hosts = append(hosts, strings.ToLower(h.String())) })
		case "permit":
			permit = lua.LVAsBool(v)
		case "strict":
			strict = lua.LVAsBool(v)
		case "routes":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "routes must be a table {[\"GET /path\"] = response or handler}")
			}
			routes = t
		default:
			L.ArgError(1, fmt.Sprintf("unknown option %q%s: options are %s", k, runtime.DidYouMean(k, fakeOptionNames), strings.Join(fakeOptionNames, ", ")))
		}
	}
	where := strings.TrimSuffix(L.Where(1), ":")
	fk, err := startFake(hosts, where, permit, strict, f.pump)
	if err != nil {
		L.RaiseError("loom.test.http: %v", err)
	}
	if err := f.router.add(fk); err != nil {
		fk.close()
		L.RaiseError("loom.test.http: %v", err)
	}
	if f.inTest {
		f.testFakes = append(f.testFakes, fk)
	} else {
		f.fileFakes = append(f.fileFakes, fk)
	}
	if routes != nil {
		for _, k := range fakeKeys(routes) {
			method, path, ok := strings.Cut(strings.TrimSpace(k), " ")
			if !ok {
				method, path = "*", k
			}
			addRoute(L, fk, method, strings.TrimSpace(path), routes.RawGetString(k))
		}
	}
	ud := L.NewUserData()
	ud.Value = fk
	L.SetMetatable(ud, f.fakeMeta(L))
	L.Push(ud)
	return 1
}

func fakeKeys(t *lua.LTable) []string {
	var ks []string
	t.ForEach(func(k, _ lua.LValue) { ks = append(ks, k.String()) })
	sort.Strings(ks)
	return ks
}

func checkFake(L *lua.LState) *fake {
	ud := L.CheckUserData(1)
	fk, ok := ud.Value.(*fake)
	if !ok {
		L.ArgError(1, "want an HTTP fake (call methods with a colon: fake:route(...))")
	}
	return fk
}

// addRoute adds a route whose answer is a handler, a response table, or
// a list of response tables served in turn (the last one repeats).
func addRoute(L *lua.LState, fk *fake, method, pattern string, v lua.LValue) {
	if !strings.HasPrefix(pattern, "/") {
		L.RaiseError("route %q: the path must start with / (patterns: /v2/droplets/{id}, /files/*)", pattern)
	}
	rt := &route{method: strings.ToUpper(method), pattern: pattern, segs: splitPath(pattern)}
	switch x := v.(type) {
	case *lua.LFunction:
		rt.handler = x
	case *lua.LTable:
		if first, ok := x.RawGetInt(1).(*lua.LTable); ok && first != nil {
			for i := 1; i <= x.Len(); i++ {
				rt.canned = append(rt.canned, responseFrom(L, x.RawGetInt(i)))
			}
		} else {
			rt.canned = []*response{responseFrom(L, x)}
		}
	default:
		rt.canned = []*response{responseFrom(L, v)}
	}
	fk.mu.Lock()
	fk.routes = append(fk.routes, rt)
	fk.mu.Unlock()
}

var responseKeys = []string{"status", "json", "body", "headers", "delay", "drop"}

// responseFrom converts a response: a table {status, json | body,
// headers, delay (seconds), drop}, a status number or a body string.
func responseFrom(L *lua.LState, v lua.LValue) *response {
	r := &response{status: 200, headers: map[string]string{}}
	switch x := v.(type) {
	case lua.LNumber:
		r.status = int(x)
		return r
	case lua.LString:
		r.body = []byte(x)
		return r
	case *lua.LTable:
	default:
		L.RaiseError("an HTTP fake response must be a table {status = 200, json = {...}}, a status number or a body string, not %s", v.Type())
	}
	t := v.(*lua.LTable)
	for _, k := range fakeKeys(t) {
		if !contains(responseKeys, k) {
			L.RaiseError("unknown response key %q%s: keys are %s", k, runtime.DidYouMean(k, responseKeys), strings.Join(responseKeys, ", "))
		}
	}
	if s, ok := t.RawGetString("status").(lua.LNumber); ok {
		r.status = int(s)
	}
	if h, ok := t.RawGetString("headers").(*lua.LTable); ok {
		h.ForEach(func(k, val lua.LValue) { r.headers[k.String()] = val.String() })
	}
	if j := t.RawGetString("json"); j != lua.LNil {
		b, err := luaval.Encode(j, luaval.EncodeOptions{L: L})
		if err != nil {
			L.RaiseError("response json: %v", err)
		}
		r.body = b
		if _, set := r.headers["Content-Type"]; !set {
			r.headers["Content-Type"] = "application/json"
		}
	} else if b, ok := t.RawGetString("body").(lua.LString); ok {
		r.body = []byte(b)
	}
	if d, ok := t.RawGetString("delay").(lua.LNumber); ok {
		r.delay = time.Duration(float64(d) * float64(time.Second))
	}
	r.drop = lua.LVAsBool(t.RawGetString("drop"))
	return r
}

// requestToLua is what a handler and fake:requests() see.
func requestToLua(L *lua.LState, r *recorded) *lua.LTable {
	t := L.CreateTable(0, 10)
	t.RawSetString("method", lua.LString(r.Method))
	t.RawSetString("path", lua.LString(r.Path))
	t.RawSetString("host", lua.LString(r.Host))
	t.RawSetString("body", lua.LString(r.Body))
	t.RawSetString("status", lua.LNumber(r.Status))
	if r.Route != "" {
		t.RawSetString("route", lua.LString(r.Route))
	}
	q := L.CreateTable(0, len(r.Query))
	for k, v := range r.Query {
		if len(v) > 0 {
			q.RawSetString(k, lua.LString(v[0]))
		}
	}
	t.RawSetString("query", q)
	h := L.CreateTable(0, len(r.Headers))
	for k, v := range r.Headers {
		if len(v) > 0 {
			h.RawSetString(strings.ToLower(k), lua.LString(v[0]))
		}
	}
	t.RawSetString("headers", h)
	p := L.CreateTable(0, len(r.Params))
	for k, v := range r.Params {
		p.RawSetString(k, lua.LString(v))
	}
	t.RawSetString("params", p)
	if len(r.Body) > 0 && json.Valid(r.Body) {
		if v, err := luaval.Decode(L, r.Body, luaval.Limits{}); err == nil {
			t.RawSetString("json", v)
		}
	}
	return t
}

// serveHandler runs a route's Lua handler for a request and sends the
// reply. It returns the error object when the handler raised (the test
// then fails with it); the plugin gets a 500 naming the error.
func (f *fileRun) serveHandler(L *lua.LState, c *handlerCall) lua.LValue {
	top := L.GetTop()
	defer L.SetTop(top)
	L.Push(c.rt.handler)
	L.Push(requestToLua(L, c.req))
	if err := L.PCall(1, 2, nil); err != nil {
		obj := errorObject(err)
		c.reply <- &response{status: 500, body: []byte("loomd test: the fake's handler for " + c.rt.pattern + " raised an error: " + errorMessage(obj) + "\n")}
		return obj
	}
	first, second := L.Get(top+1), L.Get(top+2)
	var resp *response
	func() {
		defer func() {
			if r := recover(); r != nil {
				resp = nil
			}
		}()
		switch {
		case first == lua.LNil:
			resp = &response{status: 204}
		case second != lua.LNil:
			// return status, body_or_json_table
			resp = responseFrom(L, first)
			if t, ok := second.(*lua.LTable); ok {
				b, _ := luaval.Encode(t, luaval.EncodeOptions{L: L})
				resp.body = b
				resp.headers["Content-Type"] = "application/json"
			} else {
				resp.body = []byte(second.String())
			}
		default:
			resp = responseFrom(L, first)
		}
	}()
	if resp == nil {
		msg := fmt.Sprintf("the fake's handler for %s returned %s: return a response table {status = 200, json = {...}}, a status, or status and body", c.rt.pattern, brief(first))
		c.reply <- &response{status: 500, body: []byte("loomd test: " + msg + "\n")}
		return lua.LString(msg)
	}
	c.reply <- resp
	return nil
}

// fakeMeta is the metatable of fake userdata: fake.url, fake.host and
// the methods.
func (f *fileRun) fakeMeta(L *lua.LState) *lua.LTable {
	mt := L.NewTypeMetatable(fakeTypeName)
	if mt.RawGetString("__index") != lua.LNil {
		return mt
	}
	methods := map[string]lua.LGFunction{
		// fake:route(method, path, response | {responses} | handler)
		"route": func(L *lua.LState) int {
			fk := checkFake(L)
			addRoute(L, fk, L.CheckString(2), L.CheckString(3), L.CheckAny(4))
			L.Push(L.Get(1))
			return 1
		},
		// fake:fail_next{status = 429, times = 2, method =, path =,
		// headers =, delay =, drop =}: the next matching requests get this
		// response before any route.
		"fail_next": func(L *lua.LState) int {
			fk := checkFake(L)
			o := L.CheckTable(2)
			q := &queued{left: 1}
			if n, ok := o.RawGetString("times").(lua.LNumber); ok {
				q.left = int(n)
			}
			if m, ok := o.RawGetString("method").(lua.LString); ok {
				q.method = strings.ToUpper(string(m))
			}
			if p, ok := o.RawGetString("path").(lua.LString); ok {
				q.pattern, q.segs = string(p), splitPath(string(p))
			}
			rt := L.CreateTable(0, 4)
			o.ForEach(func(k, v lua.LValue) {
				if ks := k.String(); ks != "times" && ks != "method" && ks != "path" {
					rt.RawSet(k, v)
				}
			})
			if rt.RawGetString("status") == lua.LNil && !lua.LVAsBool(rt.RawGetString("drop")) && rt.RawGetString("delay") == lua.LNil {
				rt.RawSetString("status", lua.LNumber(503))
			}
			q.resp = responseFrom(L, rt)
			fk.mu.Lock()
			fk.queue = append(fk.queue, q)
			fk.mu.Unlock()
			return 0
		},
		// fake:requests([method [, path]]): the recorded requests.
		"requests": func(L *lua.LState) int {
			fk := checkFake(L)
			rs := fk.requests(L.OptString(2, ""), L.OptString(3, ""))
			t := L.CreateTable(len(rs), 0)
			for _, r := range rs {
				t.Append(requestToLua(L, r))
			}
			L.Push(t)
			return 1
		},
		// fake:last([method [, path]]): the latest matching request or nil.
		"last": func(L *lua.LState) int {
			fk := checkFake(L)
			rs := fk.requests(L.OptString(2, ""), L.OptString(3, ""))
			if len(rs) == 0 {
				L.Push(lua.LNil)
			} else {
				L.Push(requestToLua(L, rs[len(rs)-1]))
			}
			return 1
		},
		// fake:assert_called(method, path [, times]): fails the test
		// unless that many (at least one when times is nil) requests
		// matched; returns them.
		"assert_called": func(L *lua.LState) int {
			fk := checkFake(L)
			method, path := L.CheckString(2), L.CheckString(3)
			rs := fk.requests(method, path)
			n, hasN := L.Get(4).(lua.LNumber)
			if (hasN && len(rs) != int(n)) || (!hasN && len(rs) == 0) {
				want := "at least once"
				if hasN {
					want = fmt.Sprintf("%d time(s)", int(n))
				}
				raiseFailure(L, 1, fmt.Sprintf("expected %s %s to be called %s, it was called %d time(s)", method, path, want, len(rs)), fk.summary())
			}
			t := L.CreateTable(len(rs), 0)
			for _, r := range rs {
				t.Append(requestToLua(L, r))
			}
			L.Push(t)
			return 1
		},
		"assert_not_called": func(L *lua.LState) int {
			fk := checkFake(L)
			method, path := L.CheckString(2), L.CheckString(3)
			if rs := fk.requests(method, path); len(rs) > 0 {
				raiseFailure(L, 1, fmt.Sprintf("expected no %s %s, it was called %d time(s)", method, path, len(rs)), fk.summary())
			}
			return 0
		},
		// fake:reset(): forget the recorded requests and queued failures
		// (routes stay).
		"reset": func(L *lua.LState) int {
			fk := checkFake(L)
			fk.mu.Lock()
			fk.log, fk.queue, fk.unmatched = nil, nil, nil
			for _, r := range fk.routes {
				r.served = 0
			}
			fk.mu.Unlock()
			return 0
		},
		"close": func(L *lua.LState) int {
			fk := checkFake(L)
			f.router.remove(fk)
			fk.close()
			return 0
		},
	}
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		fk := checkFake(L)
		switch key := L.CheckString(2); key {
		case "url":
			L.Push(lua.LString(fk.url))
		case "host":
			if len(fk.hosts) > 0 {
				L.Push(lua.LString(fk.hosts[0]))
			} else {
				L.Push(lua.LString(strings.Split(fk.addr, ":")[0]))
			}
		case "hosts":
			L.Push(stringList(L, fk.hosts))
		default:
			m, ok := methods[key]
			if !ok {
				names := []string{"url", "host", "hosts"}
				for n := range methods {
					names = append(names, n)
				}
				sort.Strings(names)
				L.RaiseError("HTTP fake has no field %q%s (fields: %s)", key, runtime.DidYouMean(key, names), strings.Join(names, ", "))
			}
			L.Push(L.NewFunction(m))
		}
		return 1
	}))
	mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
		fk := checkFake(L)
		L.Push(lua.LString(fmt.Sprintf("HTTP fake %s for %s", fk.url, strings.Join(fk.hosts, ", "))))
		return 1
	}))
	return mt
}
