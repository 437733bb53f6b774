package plugtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	httpb "github.com/loomrt/loom/bindings/http"
	sshb "github.com/loomrt/loom/bindings/ssh"
	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/sshdtest"
	"github.com/loomrt/loom/runtime"
)

// block is a describe block (the file itself is the root block).
type block struct {
	name          string
	parent        *block
	before, after []*lua.LFunction
}

// testCase is one it (or pending) block.
type testCase struct {
	name    string
	line    int
	block   *block
	fn      *lua.LFunction
	pending bool
}

// fileRun is the state of one test file's run: its own runtime (fresh
// work dir), the session whose VM runs the test code, and the fakes.
type fileRun struct {
	opts    Options
	file    string
	dir     string
	rt      *runtime.Runtime
	sess    *runtime.Session
	L       *lua.LState
	logger  *slog.Logger
	logs    *logCapture
	router  *router
	pump    *pump
	typ     runtime.TypeInfo
	types   []runtime.TypeInfo
	workDir string

	root, cur  *block
	tests      []*testCase
	collecting bool
	inTest     bool
	fileCtx    context.Context
	ctx        context.Context
	taskSeq    int
	fileFakes  []*fake
	testFakes  []*fake
	clock      *vclock
	sshRouter  *sshRouter
	fileSSH    []*sshFake
	testSSH    []*sshFake
	realSSHD   *sshdtest.Server
}

// logCapture collects the runtime's log lines for the running test.
type logCapture struct {
	mu    sync.Mutex
	lines []string
	buf   bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	for {
		i := bytes.IndexByte(c.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		c.lines = append(c.lines, string(c.buf.Next(i + 1)[:i]))
	}
	return len(p), nil
}

// take returns the lines logged since the last take.
func (c *logCapture) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.lines
	c.lines = nil
	return l
}

func runFile(ctx context.Context, opts Options, dir, file string, tap *tapWriter) *FileReport {
	start := time.Now()
	fr := &FileReport{File: file, Plugin: filepath.Base(dir), Tests: []*TestResult{}}
	f := &fileRun{opts: opts, file: file, dir: dir, logs: &logCapture{}, router: newRouter(), pump: &pump{}, clock: &vclock{}}
	tap.file(file)
	defer func() {
		fr.DurationMS = ms(time.Since(start))
		if fr.Error != nil {
			tap.fileError(fr)
		}
	}()
	tmp, err := os.MkdirTemp("", "loomd-test-")
	if err != nil {
		fr.Error = &Failure{Message: fmt.Sprintf("creating a temp work dir: %v", err)}
		return fr
	}
	defer os.RemoveAll(tmp)
	defer f.router.close()
	if err := f.open(ctx, tmp); err != nil {
		fr.Error = err
		return fr
	}
	defer f.rt.Close()
	defer f.sess.Close()
	fr.Plugin, fr.Type = f.typ.Plugin, f.typ.Name
	src, rerr := os.ReadFile(file)
	if rerr != nil {
		fr.Error = &Failure{Message: rerr.Error(), Location: file}
		return fr
	}
	proto, cerr := compile(src, file)
	if cerr != nil {
		fr.Error = cerr
		return fr
	}
	fileCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	f.fileCtx = fileCtx
	f.ctx = fileCtx
	_ = f.sess.Do(fileCtx, f.logger, func(L *lua.LState) error {
		f.L = L
		f.install(L)
		// Collect: run the file body, which registers the tests.
		cctx, ccancel := context.WithTimeout(fileCtx, opts.Timeout)
		f.sess.SetContext(cctx)
		f.collecting = true
		L.Push(L.NewFunctionFromProto(proto))
		err := L.PCall(0, 0, nil)
		f.collecting = false
		ccancel()
		f.sess.SetContext(fileCtx)
		if err != nil {
			fr.Error = f.failureOf(err, cctx)
			fr.Error.Message = "running the test file (outside any it block): " + fr.Error.Message
			return nil
		}
		for _, tc := range f.tests {
			full := tc.fullName()
			if opts.Match != nil && !opts.Match.MatchString(full) {
				continue
			}
			res := f.runTest(tc)
			fr.Tests = append(fr.Tests, res)
			tap.test(file, res)
			if ctx.Err() != nil {
				break
			}
		}
		return nil
	})
	for _, fk := range f.fileFakes {
		f.router.remove(fk)
		fk.close()
	}
	for _, fk := range f.fileSSH {
		f.sshRouter.remove(fk)
		fk.close()
	}
	if f.realSSHD != nil {
		f.realSSHD.Stop()
	}
	if len(f.tests) == 0 && fr.Error == nil {
		fr.Error = &Failure{Message: "no tests: the file defines no it block", Location: file}
	}
	return fr
}

// open builds the file's runtime on the plugin folder alone and a
// session on its type.
func (f *fileRun) open(ctx context.Context, tmp string) *Failure {
	f.logger = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	known := filepath.Join(tmp, "known_hosts")
	if err := os.WriteFile(known, nil, 0o600); err != nil {
		return &Failure{Message: err.Error()}
	}
	f.sshRouter = newSSHRouter(known)
	reg := std.New(std.Options{
		Clock: f.clock,
		HTTP:  httpb.Options{UserAgent: "loomd-test", Transport: f.router, RetryDelay: 10 * time.Millisecond},
		// Every lend of an idle pooled connection is probed (in process,
		// cheap), so a connection to a fake closed by an earlier test is
		// never handed out.
		SSH: sshb.Options{KnownHosts: []string{known}, DialRetries: -1, Logger: f.logger.With("component", "ssh"),
			Dial: f.sshRouter.dial, IdleCheck: time.Nanosecond},
	})
	rt, err := runtime.New(runtime.Options{
		PluginsDir: filepath.Dir(f.dir),
		Folders:    []string{f.dir},
		WorkDir:    filepath.Join(tmp, "work"),
		Tenant:     "test",
		Bindings:   reg,
		Logger:     f.logger,
		Timeout:    f.opts.Timeout,
		PoolSize:   2,
		PermitHTTP: f.router.permitted,
		InstructionHook: func() func(*lua.LState, *lua.FunctionProto, int) {
			if f.opts.cov == nil {
				return nil
			}
			return f.opts.cov.hook
		}(),
	})
	if err != nil {
		reg.Close()
		return &Failure{Message: err.Error()}
	}
	if err := rt.Load(ctx); err != nil {
		rt.Close()
		return &Failure{Message: err.Error()}
	}
	f.logs.take() // load-time lines are reported below, not per test
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			rt.Close()
			return &Failure{Message: "the plugin does not load: " + e.Message, Location: e.Location()}
		}
	}
	f.types = rt.Types()
	if len(f.types) == 0 {
		rt.Close()
		return &Failure{Message: "the plugin declares no type", Location: f.dir}
	}
	f.typ = f.types[0]
	sess, err := rt.NewSession(f.typ.Name)
	if err != nil {
		rt.Close()
		return &Failure{Message: fmt.Sprintf("opening a VM on %s: %v", f.typ.Name, err)}
	}
	f.rt, f.sess, f.workDir = rt, sess, sess.WorkDir()
	return nil
}

// compile parses a test file under its path, so errors and assertion
// failures say file:line.
func compile(src []byte, name string) (*lua.FunctionProto, *Failure) {
	chunk, err := parse.Parse(bytes.NewReader(src), name)
	if err != nil {
		fl := &Failure{Message: "syntax error: " + strings.TrimSpace(err.Error()), Location: name}
		var pe *parse.Error
		if errors.As(err, &pe) {
			fl.Location = fmt.Sprintf("%s:%d", name, pe.Pos.Line)
			fl.Message = fmt.Sprintf("syntax error near '%s': %s", pe.Token, strings.TrimSpace(pe.Message))
		}
		return nil, fl
	}
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		return nil, &Failure{Message: "compile error: " + err.Error(), Location: name}
	}
	return proto, nil
}

func (tc *testCase) fullName() string {
	var parts []string
	for b := tc.block; b != nil && b.parent != nil; b = b.parent {
		parts = append([]string{b.name}, parts...)
	}
	return strings.Join(append(parts, tc.name), " ")
}

// runTest runs one it block with its before_each and after_each under
// its own deadline, and closes the fakes it opened.
func (f *fileRun) runTest(tc *testCase) *TestResult {
	res := &TestResult{Name: tc.fullName(), Line: tc.line}
	if tc.pending {
		res.Status = StatusPending
		return res
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(f.fileCtx, f.opts.Timeout)
	defer cancel()
	f.ctx = ctx
	f.sess.SetContext(ctx)
	f.inTest = true
	f.clock.reset()
	f.logs.take()
	var blocks []*block
	for b := tc.block; b != nil; b = b.parent {
		blocks = append([]*block{b}, blocks...)
	}
	var failure *Failure
	skip := ""
	call := func(fn *lua.LFunction) {
		f.L.Push(fn)
		if err := f.L.PCall(0, 0, nil); err != nil && failure == nil && skip == "" {
			if t, ok := errorObject(err).(*lua.LTable); ok && t.RawGetString(skipMarker) != lua.LNil {
				skip = t.RawGetString(skipMarker).String()
				return
			}
			failure = f.failureOf(err, ctx)
		}
	}
befores:
	for _, b := range blocks {
		for _, fn := range b.before {
			call(fn)
			if failure != nil {
				failure.Message = "in before_each: " + failure.Message
				break befores
			}
		}
	}
	if failure == nil && skip == "" {
		call(tc.fn)
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		for _, fn := range blocks[i].after {
			had := failure != nil
			call(fn)
			if !had && failure != nil {
				failure.Message = "in after_each: " + failure.Message
			}
		}
	}
	for _, fk := range f.testFakes {
		if u := fk.takeUnmatched(); len(u) > 0 && fk.strict && failure == nil {
			failure = &Failure{Message: u[0] + "; add a route, or create the fake with strict = false", Location: fk.where}
			if len(u) > 1 {
				failure.Diff = strings.Join(u[1:], "\n")
			}
		}
		f.router.remove(fk)
		fk.close()
	}
	f.testFakes = nil
	for _, fk := range f.fileFakes {
		if u := fk.takeUnmatched(); len(u) > 0 && fk.strict && failure == nil {
			failure = &Failure{Message: u[0] + "; add a route, or create the fake with strict = false", Location: fk.where}
		}
	}
	sshUnexpected := func(fk *sshFake) {
		if u := fk.takeUnmatched(); len(u) > 0 && fk.strict && failure == nil {
			failure = &Failure{Message: u[0] + "; add an expectation (host:on(command, answer)), or create the fake with strict = false", Location: fk.where}
			if len(u) > 1 {
				failure.Diff = strings.Join(u[1:], "\n")
			}
		}
	}
	for _, fk := range f.testSSH {
		sshUnexpected(fk)
		f.sshRouter.remove(fk)
		fk.close()
	}
	f.testSSH = nil
	for _, fk := range f.fileSSH {
		sshUnexpected(fk)
	}
	f.inTest = false
	f.sess.SetContext(f.fileCtx)
	f.ctx = f.fileCtx
	res.DurationMS = ms(time.Since(start))
	logs := f.logs.take()
	if failure != nil {
		res.Status, res.Failure, res.Logs = StatusFail, failure, logs
	} else if skip != "" {
		res.Status, res.Skip = StatusPending, skip
	} else {
		res.Status = StatusPass
		if f.opts.Verbose {
			res.Logs = logs
		}
	}
	return res
}

var leadingLocation = regexp.MustCompile(`^([^\s:][^:\n]*\.lua):(\d+):\s*`)

// failureOf turns a Lua error into a Failure: an assertion's own
// message, location and diff, or an error's message and traceback.
func (f *fileRun) failureOf(err error, ctx context.Context) *Failure {
	if ctx.Err() != nil && f.fileCtx.Err() == nil {
		return &Failure{Message: fmt.Sprintf("test timed out after %s (loomd test --timeout)", f.opts.Timeout), Traceback: traceOf(err)}
	}
	obj := errorObject(err)
	if t, ok := obj.(*lua.LTable); ok && t.RawGetString(assertMarker) == lua.LTrue {
		fl := &Failure{Message: t.RawGetString("message").String(), Location: t.RawGetString("location").String()}
		if d, ok := t.RawGetString("diff").(lua.LString); ok {
			fl.Diff = string(d)
		}
		return fl
	}
	fl := &Failure{Message: errorMessage(obj), Traceback: traceOf(err)}
	if m := leadingLocation.FindStringSubmatch(fl.Message); m != nil {
		fl.Location = m[1] + ":" + m[2]
		fl.Message = fl.Message[len(m[0]):]
	} else if loc := testFrame(fl.Traceback, f.file); loc != "" {
		fl.Location = loc
	}
	if t, ok := obj.(*lua.LTable); ok {
		fl.Diff = "error: " + show(t)
	}
	return fl
}

func traceOf(err error) string {
	if ae, ok := err.(*lua.ApiError); ok {
		return ae.StackTrace
	}
	return ""
}

// testFrame finds the innermost traceback line in the test file.
func testFrame(trace, file string) string {
	for _, line := range strings.Split(trace, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, file+":") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) >= 2 {
				if _, err := strconv.Atoi(parts[1]); err == nil {
					return parts[0] + ":" + parts[1]
				}
			}
		}
	}
	return ""
}

// whereLine is the line of the Lua code at level (1: the caller).
func whereLine(L *lua.LState, level int) int {
	w := strings.TrimSuffix(L.Where(level), ":")
	if i := strings.LastIndexByte(w, ':'); i >= 0 {
		n, _ := strconv.Atoi(w[i+1:])
		return n
	}
	return 0
}

// install sets the test globals: describe, it, pending, before_each,
// after_each, assert, and loom (the stdlib table plus loom.test).
func (f *fileRun) install(L *lua.LState) {
	f.root = &block{}
	f.cur = f.root
	g := L.G.Global
	g.RawSetString("describe", L.NewFunction(func(L *lua.LState) int {
		name := L.CheckString(1)
		fn := L.CheckFunction(2)
		if !f.collecting {
			L.RaiseError("describe(%q) inside a running test: describe blocks belong at the top level or in other describe blocks", name)
		}
		b := &block{name: name, parent: f.cur}
		f.cur = b
		L.Push(fn)
		L.Call(0, 0)
		f.cur = b.parent
		return 0
	}))
	addTest := func(L *lua.LState, pending bool) int {
		name := L.CheckString(1)
		if !f.collecting {
			L.RaiseError("it(%q) inside a running test: it blocks belong at the top level or in describe blocks", name)
		}
		fn, _ := L.Get(2).(*lua.LFunction)
		f.tests = append(f.tests, &testCase{name: name, line: whereLine(L, 1), block: f.cur, fn: fn, pending: pending || fn == nil})
		return 0
	}
	g.RawSetString("it", L.NewFunction(func(L *lua.LState) int { return addTest(L, false) }))
	g.RawSetString("pending", L.NewFunction(func(L *lua.LState) int { return addTest(L, true) }))
	hook := func(after bool) lua.LGFunction {
		return func(L *lua.LState) int {
			fn := L.CheckFunction(1)
			if !f.collecting {
				L.RaiseError("before_each/after_each inside a running test: call them in a describe block or at the top level")
			}
			if after {
				f.cur.after = append(f.cur.after, fn)
			} else {
				f.cur.before = append(f.cur.before, fn)
			}
			return 0
		}
	}
	g.RawSetString("before_each", L.NewFunction(hook(false)))
	g.RawSetString("after_each", L.NewFunction(hook(true)))
	g.RawSetString("assert", newAssert(L))

	// loom: what require("loom") gives, plus loom.test. A table of its
	// own, so the stdlib table the plugin code shares is left as it is.
	loomT := L.CreateTable(0, 1)
	top := L.GetTop()
	L.Push(L.GetGlobal("require"))
	L.Push(lua.LString("loom"))
	if err := L.PCall(1, 1, nil); err == nil {
		mt := L.CreateTable(0, 1)
		mt.RawSetString("__index", L.Get(-1))
		loomT.Metatable = mt
	}
	L.SetTop(top)
	loomT.RawSetString("test", f.testModule(L))
	g.RawSetString("loom", loomT)
}
