package plugtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/luaval"
	"github.com/loomrt/loom/runtime"
)

// Coopr's task names in the order a cluster's lifecycle runs them.
var lifecycle = []string{"CREATE", "CONFIRM", "BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START", "STOP", "REMOVE", "DELETE"}

func familyOf(taskName string) (runtime.Family, bool) {
	switch taskName {
	case "CREATE", "CONFIRM", "DELETE":
		return runtime.Provider, true
	case "BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START", "STOP", "REMOVE":
		return runtime.Automator, true
	}
	return "", false
}

// taskOptions are loom.test.task's options.
var taskOptionNames = []string{"type", "fields", "config", "id", "tenant", "hostname", "providerid", "ipaddress", "sshauth", "service", "node"}

// buildTask makes a Coopr task for taskName as a Go value: ids, the keys
// dispatch reads, the fields where the family's hooks find them, and
// opts.config merged on top (deeply).
func (f *fileRun) buildTask(taskName string, opts map[string]any) (map[string]any, error) {
	name := strings.ToUpper(taskName)
	fam, ok := familyOf(name)
	if !ok {
		return nil, fmt.Errorf("unknown task name %q: want one of %s", taskName, strings.Join(lifecycle, ", "))
	}
	for k := range opts {
		if !contains(taskOptionNames, k) {
			return nil, fmt.Errorf("unknown task option %q%s: options are %s", k, runtime.DidYouMean(k, taskOptionNames), strings.Join(taskOptionNames, ", "))
		}
	}
	typ, _ := opts["type"].(string)
	if typ == "" {
		var err error
		if typ, err = f.defaultType(name, fam); err != nil {
			return nil, err
		}
	}
	f.taskSeq++
	id := fmt.Sprintf("test-%d", f.taskSeq)
	if s, ok := opts["id"].(string); ok && s != "" {
		id = s
	}
	cfg := map[string]any{"hostname": "node1.example.com", "flavor": "small", "image": "debian"}
	if h, ok := opts["hostname"].(string); ok {
		cfg["hostname"] = h
	}
	fields, _ := opts["fields"].(map[string]any)
	if fields == nil {
		fields = map[string]any{}
	}
	switch {
	case fam == runtime.Provider:
		cfg["provider"] = map[string]any{"providertype": typ, "provisioner": fields}
		if p, ok := opts["providerid"]; ok {
			cfg["providerid"] = p
		}
	default:
		ip := "127.0.0.1"
		if s, ok := opts["ipaddress"].(string); ok {
			ip = s
		}
		cfg["ipaddresses"] = map[string]any{"access_v4": ip, "bind_v4": ip}
		if a, ok := opts["sshauth"]; ok {
			cfg["ssh-auth"] = a
		}
		if name == "BOOTSTRAP" {
			cfg["automators"] = []any{typ}
		} else {
			svc := "svc"
			if s, ok := opts["service"].(string); ok && s != "" {
				svc = s
			}
			cfg["service"] = map[string]any{"name": svc, "action": map[string]any{"type": typ, "fields": fields}}
		}
	}
	if c, ok := opts["config"].(map[string]any); ok {
		cfg = mergeDeep(cfg, c)
	}
	task := map[string]any{"taskId": id, "jobId": "job-1", "clusterId": "cluster-1", "nodeId": "node-1", "taskName": name, "config": cfg}
	if n, ok := opts["node"].(string); ok && n != "" {
		task["nodeId"] = n
	}
	if t, ok := opts["tenant"].(string); ok && t != "" {
		task["tenantId"] = t
	}
	return task, nil
}

// defaultType is the plugin's type for a task of family fam.
func (f *fileRun) defaultType(name string, fam runtime.Family) (string, error) {
	var names []string
	for _, t := range f.types {
		if t.Family == fam {
			names = append(names, t.Name)
		}
	}
	switch len(names) {
	case 1:
		return names[0], nil
	case 0:
		return "", fmt.Errorf("%s is a task for %s plugins, and %s declares no %s type (give type = \"...\" to test another plugin's task, or a stand-in result in a chain)",
			name, fam, f.typ.Plugin, fam)
	}
	return "", fmt.Errorf("%s declares several %s types (%s): say which with type = \"...\"", f.typ.Plugin, fam, strings.Join(names, ", "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// mergeDeep merges src into dst: nested maps merge, anything else in src
// replaces.
func mergeDeep(dst, src map[string]any) map[string]any {
	if dst == nil {
		dst = map[string]any{}
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = mergeDeep(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// toGo converts a Lua value for the builders (tables become maps or
// slices).
func toGo(L *lua.LState, v lua.LValue) (any, error) {
	return luaval.ToGo(L, v, luaval.Limits{})
}

func optMap(L *lua.LState, idx int) map[string]any {
	v := L.Get(idx)
	if v == lua.LNil {
		return map[string]any{}
	}
	t, ok := v.(*lua.LTable)
	if !ok {
		L.ArgError(idx, "options must be a table")
	}
	g, err := toGo(L, t)
	if err != nil {
		L.ArgError(idx, err.Error())
	}
	m, ok := g.(map[string]any)
	if !ok {
		if sl, isSl := g.([]any); isSl && len(sl) == 0 {
			return map[string]any{}
		}
		L.ArgError(idx, "options must be a table with named keys")
	}
	return m
}

// runTask runs a task through the runtime while serving the fakes' Lua
// handlers on this goroutine, which owns the Lua state.
func (f *fileRun) runTask(L *lua.LState, data []byte) (*runtime.Result, []string, error) {
	task, err := runtime.ParseTask(data)
	if err != nil {
		return nil, nil, err
	}
	f.logs.mu.Lock()
	mark := len(f.logs.lines)
	f.logs.mu.Unlock()
	var res *runtime.Result
	var rerr error
	f.pumpWhile(L, func() { res, rerr = f.sess.RunTaskNested(f.ctx, task, f.logger) })
	if rerr != nil {
		f.noteInterrupted(rerr)
	}
	f.logs.mu.Lock()
	var logs []string
	if mark <= len(f.logs.lines) {
		logs = append(logs, f.logs.lines[mark:]...)
	}
	// The outcome goes to the test's log too, so a failed assertion on
	// a result shows why the hook failed.
	switch {
	case rerr != nil:
		f.logs.lines = append(f.logs.lines, fmt.Sprintf("loomd test: %s %s could not run: %v", task.TaskName, task.TaskID, rerr))
	case res.Status != 0:
		line := fmt.Sprintf("loomd test: %s %s -> status %d: %s", task.TaskName, task.TaskID, res.Status, res.Message)
		if rest := strings.TrimPrefix(res.Stderr, res.Message); rest != "" {
			line += "\n" + strings.TrimPrefix(rest, "\n")
		}
		f.logs.lines = append(f.logs.lines, strings.Split(line, "\n")...)
	default:
		f.logs.lines = append(f.logs.lines, fmt.Sprintf("loomd test: %s %s -> status 0", task.TaskName, task.TaskID))
	}
	f.logs.mu.Unlock()
	return res, logs, rerr
}

// resultToLua converts a Result to the table a Coopr server would
// receive.
func resultToLua(L *lua.LState, res *runtime.Result) lua.LValue {
	b, err := json.Marshal(res)
	if err != nil {
		L.RaiseError("converting the result: %v", err)
	}
	v, err := luaval.Decode(L, b, luaval.Limits{})
	if err != nil {
		L.RaiseError("converting the result: %v", err)
	}
	return v
}

func stringList(L *lua.LState, s []string) *lua.LTable {
	t := L.CreateTable(len(s), 0)
	for _, x := range s {
		t.Append(lua.LString(x))
	}
	luaval.MarkArray(L, t)
	return t
}

// testModule builds loom.test.
func (f *fileRun) testModule(L *lua.LState) *lua.LTable {
	t := L.CreateTable(0, 12)
	t.RawSetString("type", lua.LString(f.typ.Name))
	t.RawSetString("family", lua.LString(string(f.typ.Family)))
	t.RawSetString("plugin", lua.LString(f.typ.Plugin))
	t.RawSetString("plugin_dir", lua.LString(f.dir))
	t.RawSetString("work_dir", lua.LString(f.workDir))
	t.RawSetString("file", lua.LString(f.file))
	t.RawSetString("task", L.NewFunction(func(L *lua.LState) int {
		name := L.CheckString(1)
		task, err := f.buildTask(name, optMap(L, 2))
		if err != nil {
			L.RaiseError("loom.test.task: %v", err)
		}
		L.Push(luaval.FromGo(L, task))
		return 1
	}))
	t.RawSetString("run", L.NewFunction(func(L *lua.LState) int {
		var taskV lua.LValue
		switch x := L.CheckAny(1).(type) {
		case lua.LString:
			task, err := f.buildTask(string(x), optMap(L, 2))
			if err != nil {
				L.RaiseError("loom.test.run: %v", err)
			}
			taskV = luaval.FromGo(L, task)
		case *lua.LTable:
			taskV = x
		default:
			L.ArgError(1, "want a task table (loom.test.task) or a task name")
		}
		data, err := luaval.Encode(taskV, luaval.EncodeOptions{L: L})
		if err != nil {
			L.RaiseError("loom.test.run: the task does not convert to JSON: %v", err)
		}
		res, logs, err := f.runTask(L, data)
		if err != nil {
			L.RaiseError("loom.test.run: %v", err)
		}
		L.Push(resultToLua(L, res))
		L.Push(stringList(L, logs))
		return 2
	}))
	t.RawSetString("chain", L.NewFunction(f.chain))
	t.RawSetString("acceptance", L.NewFunction(f.acc.declare))
	t.RawSetString("call", L.NewFunction(f.call))
	t.RawSetString("http", L.NewFunction(f.newHTTPFake))
	t.RawSetString("clock", f.clock.module(L))
	t.RawSetString("ssh", L.NewFunction(f.newSSHFakeLua))
	t.RawSetString("sshd", L.NewFunction(f.sshd))
	t.RawSetString("files", L.NewFunction(func(L *lua.LState) int {
		L.Push(stringList(L, listFiles(f.workDir)))
		return 1
	}))
	return t
}

// listFiles lists the files under dir, relative and sorted.
func listFiles(dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

var chainOptionNames = []string{"type", "fields", "config", "steps", "stop_on_failure", "idempotent"}

// chain runs tasks the way a Coopr server does for one node: each
// result's result map is merged into the config of every later task (even
// after a failure), and on success its ipaddresses and hostname replace
// the node's. A step is a task name, or a table {"BOOTSTRAP", result =
// {...}, ipaddresses = {...}} standing in for a plugin this run does not
// load.
func (f *fileRun) chain(L *lua.LState) int {
	opts := optMap(L, 1)
	for k := range opts {
		if !contains(chainOptionNames, k) {
			L.RaiseError("loom.test.chain: unknown option %q%s: options are %s", k, runtime.DidYouMean(k, chainOptionNames), strings.Join(chainOptionNames, ", "))
		}
	}
	stop := true
	if b, ok := opts["stop_on_failure"].(bool); ok {
		stop = b
	}
	idempotent, _ := opts["idempotent"].(bool)
	again := L.CreateTable(0, 4)
	changes := L.CreateTable(0, 0)
	var steps []any
	if s, ok := opts["steps"].([]any); ok {
		steps = s
	} else {
		for _, n := range lifecycle {
			if fam, _ := familyOf(n); fam == f.typ.Family {
				steps = append(steps, n)
			}
		}
	}
	config, _ := opts["config"].(map[string]any)
	config = mergeDeep(map[string]any{}, config)
	before := map[string]bool{}
	for _, p := range listFiles(f.workDir) {
		before[p] = true
	}
	out := L.CreateTable(0, 8)
	results := L.CreateTable(0, len(steps))
	tasks := L.CreateTable(0, len(steps))
	order := L.CreateTable(len(steps), 0)
	ok, completed := true, true
	for i, st := range steps {
		var name string
		var standIn map[string]any
		switch x := st.(type) {
		case string:
			name = strings.ToUpper(x)
		case map[string]any:
			standIn = x
			name, _ = x["1"].(string)
			if name == "" {
				name, _ = x["name"].(string)
			}
			name = strings.ToUpper(name)
		}
		if _, known := familyOf(name); !known {
			L.RaiseError("loom.test.chain: step %d: %v is not a task name (want one of %s, or {\"NAME\", result = {...}} for a stand-in)",
				i+1, st, strings.Join(lifecycle, ", "))
		}
		var res *runtime.Result
		if standIn != nil {
			res = standInResult(standIn)
		} else {
			topts := map[string]any{"config": config}
			if fam, _ := familyOf(name); fam == f.typ.Family {
				topts["fields"] = opts["fields"]
				if typ, ok := opts["type"]; ok {
					topts["type"] = typ
				}
			}
			task, err := f.buildTask(name, topts)
			if err != nil {
				L.RaiseError("loom.test.chain: step %d (%s): %v", i+1, name, err)
			}
			tasks.RawSetString(name, luaval.FromGo(L, task))
			data, _ := json.Marshal(task)
			r, _, err := f.runTask(L, data)
			if err != nil {
				L.RaiseError("loom.test.chain: step %d (%s): %v", i+1, name, err)
			}
			res = r
			if idempotent && res.Status == 0 {
				// The step again, as Coopr retries it: nothing may change.
				task["taskId"] = fmt.Sprintf("%v-again", task["taskId"])
				data, _ := json.Marshal(task)
				before := f.writes.Load()
				r2, _, err := f.runTask(L, data)
				if err != nil {
					L.RaiseError("loom.test.chain: step %d (%s) run again: %v", i+1, name, err)
				}
				writes := f.writes.Load() - before
				again.RawSetString(name, resultToLua(L, r2))
				if diff := resultChanges(res, r2, name, writes); len(diff) > 0 {
					changes.RawSetString(name, stringList(L, diff))
					if ok {
						out.RawSetString("failed", lua.LString(name+" (run again)"))
					}
					ok = false
				}
			}
		}
		rv := resultToLua(L, res)
		results.RawSetString(name, rv)
		order.Append(lua.LString(name))
		// What a Coopr server does with the result (see
		// reference/coopr-server.md): result keys go to the top of the
		// node's config, always; addresses and hostname on success.
		for k, v := range res.Result {
			config[k] = v
		}
		if res.Status == 0 {
			if res.IPAddresses != nil {
				config["ipaddresses"] = res.IPAddresses
			}
			if res.Hostname != "" {
				config["hostname"] = res.Hostname
			}
		} else {
			if ok {
				out.RawSetString("failed", lua.LString(name))
			}
			ok = false
			if stop {
				completed = i == len(steps)-1
				break
			}
		}
	}
	out.RawSetString("ok", lua.LBool(ok))
	if idempotent {
		out.RawSetString("again", again)
		out.RawSetString("changes", changes)
	}
	out.RawSetString("results", results)
	out.RawSetString("tasks", tasks)
	out.RawSetString("order", order)
	out.RawSetString("config", luaval.FromGo(L, config))
	var left []string
	if completed {
		for _, p := range listFiles(f.workDir) {
			if !before[p] {
				left = append(left, p)
			}
		}
	}
	out.RawSetString("leftovers", stringList(L, left))
	L.Push(out)
	return 1
}

// resultChanges lists how a step's second run differs from its first:
// its status, result, addresses or hostname, and (but for DELETE, which
// asks again) any request that changes something (POST, PUT, PATCH,
// DELETE) it sent.
func resultChanges(a, b *runtime.Result, step string, writes int64) []string {
	var out []string
	if b.Status != a.Status {
		out = append(out, fmt.Sprintf("status: %d, then %d: %s", a.Status, b.Status, b.Message))
	}
	cmp := func(what string, x, y any) {
		xb, _ := json.Marshal(x)
		yb, _ := json.Marshal(y)
		if !bytes.Equal(xb, yb) {
			out = append(out, fmt.Sprintf("%s: %s, then %s", what, xb, yb))
		}
	}
	cmp("result", a.Result, b.Result)
	cmp("ipaddresses", a.IPAddresses, b.IPAddresses)
	cmp("hostname", a.Hostname, b.Hostname)
	if writes > 0 && step != "DELETE" {
		out = append(out, fmt.Sprintf("the second run sent %d request(s) that change something (POST, PUT, PATCH or DELETE): a retried %s must find what the first made", writes, step))
	}
	return out
}

// standInResult is the result a chain step's table gives for a plugin
// the run does not load.
func standInResult(m map[string]any) *runtime.Result {
	r := &runtime.Result{}
	if s, ok := m["status"].(float64); ok {
		r.Status = int(s)
	}
	r.Result, _ = m["result"].(map[string]any)
	r.IPAddresses, _ = m["ipaddresses"].(map[string]any)
	r.Hostname, _ = m["hostname"].(string)
	r.Message, _ = m["message"].(string)
	return r
}
