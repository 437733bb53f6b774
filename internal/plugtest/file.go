package plugtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"

	httpb "github.com/loomrt/loom/bindings/http"
	sshb "github.com/loomrt/loom/bindings/ssh"
	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/sshdtest"
	"github.com/loomrt/loom/runtime"
)

// hookFn is a setup or teardown function and where it was declared.
type hookFn struct {
	fn   *lua.LFunction
	line int
	kind string // "setup", "lazy_setup", "teardown", ...
}

// block is a describe (or insulate, expose) block; the file itself is
// the root block.
type block struct {
	name     string
	line     int
	parent   *block
	children []any // *block or *testCase, in declaration order
	tags     []string
	insulate bool
	// before_each and after_each.
	before, after []*lua.LFunction
	// setup/teardown (strict: they run even when no test of the block
	// is selected) and lazy_setup/lazy_teardown (before_all/after_all:
	// only when one is).
	setups, lazySetups, teardowns, lazyTeardowns []hookFn
	// acceptance marks a block of acceptance tests (#acceptance).
	acceptance bool
}

// testCase is one it (or pending) block.
type testCase struct {
	name       string
	line       int
	block      *block
	fn         *lua.LFunction
	pending    bool
	tags       []string
	acceptance bool
}

// fileRun is the state of one test file's run: its own runtime (fresh
// work dir), the session whose VM runs the test code and the hooks, and
// the fakes.
type fileRun struct {
	opts    Options
	file    string
	dir     string
	rt      *runtime.Runtime
	sess    *runtime.Session
	L       *lua.LState
	env     *lua.LTable // the test file's globals (see install)
	gate    *gate
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
	// finally functions of the running test, run when it ends.
	finally []*lua.LFunction
	// spies holds the spies and stubs by scope: those made in a test are
	// reverted when it ends, in a block's setup when the block ends.
	spies *spyRegistry
	// interrupted is the last hook stopped by the test's --timeout, to
	// report the runaway at its own line.
	interrupted *runtime.CancelledError
	// rng shuffles tests with --shuffle.
	rng *rand.Rand
	// acc is the acceptance mode state of the file.
	acc *accRun
	// writes counts the requests that change something (POST, PUT,
	// PATCH, DELETE) the plugin sent, for chain's idempotent check.
	writes atomic.Int64
	// tap and fr receive results as tests end.
	tap *tapWriter
	fr  *FileReport
	// selected are the tests that run, after --run, tags and acceptance.
	selected map[*testCase]bool
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
	f := &fileRun{opts: opts, file: file, dir: dir, logs: &logCapture{}, router: newRouter(), pump: &pump{}, clock: &vclock{},
		gate: &gate{}, spies: newSpyRegistry(), tap: tap, fr: fr}
	if opts.Shuffle {
		f.rng = rand.New(rand.NewSource(opts.Seed ^ int64(len(file))))
	}
	f.acc = newAccRun(f)
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
		f.gate.root = L
		f.gate.hooks = f.sess.HookThread()
		f.gate.handlers, _ = L.NewThread()
		// Collect: run the file body, which registers the tests.
		cctx, ccancel := context.WithTimeout(fileCtx, opts.Timeout)
		f.sess.SetContext(cctx)
		f.ctx = cctx
		f.collecting = true
		fn := L.NewFunctionFromProto(proto)
		fn.Env = f.env
		L.Push(fn)
		err := L.PCall(0, 0, nil)
		f.collecting = false
		ccancel()
		f.sess.SetContext(fileCtx)
		f.ctx = fileCtx
		if err != nil {
			fr.Error = f.failureOf(err, cctx)
			fr.Error.Message = "running the test file (outside any it block): " + fr.Error.Message
			return nil
		}
		f.selected = map[*testCase]bool{}
		for _, tc := range f.tests {
			if f.wanted(tc) && !opts.Sweep {
				f.selected[tc] = true
			}
		}
		f.runBlock(f.root)
		// The sweeper deletes what the acceptance tests made, whatever
		// they did; then the recording is written.
		if fl := f.acc.sweep(L); fl != nil {
			fl.Message = "in the sweeper: " + fl.Message
			f.report(&TestResult{Name: "(sweeper)", Line: f.acc.decl.line, Status: StatusFail, Failure: fl})
		} else if opts.Sweep && f.acc.decl != nil && f.acc.decl.sweeper != nil {
			f.report(&TestResult{Name: "(sweeper)", Line: f.acc.decl.line, Status: StatusPass})
		}
		if err := f.acc.save(); err != nil {
			f.report(&TestResult{Name: "(recording)", Status: StatusFail, Failure: &Failure{Message: "writing the recording: " + err.Error(), Location: f.acc.casPath}})
		}
		f.spies.revertScope(f.root)
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
	if fr.Error != nil {
		f.acc.redactFailure(fr.Error)
	}
	return fr
}

// wanted says whether a test runs: its name matches --run, its tags
// (its own and its blocks') pass --tags and --exclude-tags, and it is an
// acceptance test exactly when the run is in acceptance mode (other
// tests run in both).
func (f *fileRun) wanted(tc *testCase) bool {
	if f.opts.Match != nil && !f.opts.Match.MatchString(tc.fullName()) {
		return false
	}
	tags := tc.allTags()
	if len(f.opts.Tags) > 0 && !anyIn(tags, f.opts.Tags) {
		return false
	}
	if anyIn(tags, f.opts.ExcludeTags) {
		return false
	}
	return true
}

func anyIn(have, want []string) bool {
	for _, w := range want {
		for _, h := range have {
			if strings.EqualFold(h, w) {
				return true
			}
		}
	}
	return false
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
	transport := fileTransport{f}
	reg := std.New(std.Options{
		Clock: f.clock,
		HTTP:  httpb.Options{UserAgent: "loomd-test", Transport: transport, RetryDelay: 10 * time.Millisecond},
		// Every lend of an idle pooled connection is probed (in process,
		// cheap), so a connection to a fake closed by an earlier test is
		// never handed out.
		SSH: sshb.Options{KnownHosts: []string{known}, DialRetries: -1, Logger: f.logger.With("component", "ssh"),
			Dial: f.sshRouter.dial, IdleCheck: time.Nanosecond},
	})
	cov := f.opts.cov
	rt, err := runtime.New(runtime.Options{
		PluginsDir: filepath.Dir(f.dir),
		Folders:    []string{f.dir},
		WorkDir:    filepath.Join(tmp, "work"),
		Tenant:     "test",
		Bindings:   reg,
		Logger:     f.logger,
		PoolSize:   2,
		PermitHTTP: f.permitted,
		// Hooks keep their definitions' deadlines, on the virtual clock;
		// the test's own context (--timeout) bounds real time.
		HookContext: f.clock.hookContext,
		InstructionHook: func(L *lua.LState, p *lua.FunctionProto, pc int) {
			if cov != nil {
				cov.hook(L, p, pc)
			}
			f.gate.instruction(L, p, pc)
		},
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

// permitted is runtime.Options.PermitHTTP: the fakes' 127.0.0.1 when a
// test permits it, and in acceptance mode the hosts the tests declare.
func (f *fileRun) permitted() []string {
	p := f.router.permitted()
	if f.acc != nil {
		p = append(p, f.acc.permitted()...)
	}
	return p
}

// fileTransport is the file's loom.http transport: the fakes, then a
// running acceptance test's hosts (live or replayed), and nothing else.
type fileTransport struct{ f *fileRun }

func (t fileTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		t.f.writes.Add(1)
	}
	if !t.f.router.serves(req) {
		if t.f.acc != nil {
			if resp, err, ok := t.f.acc.roundTrip(req); ok {
				return resp, err
			}
		}
	}
	return t.f.router.RoundTrip(req)
}

// compile parses a test file under its path, as the loader parses plugin
// files, so errors and assertion failures say file:line (an unclosed
// block at the end of the file too).
func compile(src []byte, name string) (*lua.FunctionProto, *Failure) {
	proto, le := runtime.CompileChunk(src, name)
	if le != nil {
		fl := &Failure{Message: le.Message, Location: name}
		if le.Line > 0 {
			fl.Location = fmt.Sprintf("%s:%d", name, le.Line)
		}
		return nil, fl
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

// allTags are the test's tags and its blocks'.
func (tc *testCase) allTags() []string {
	tags := append([]string{}, tc.tags...)
	for b := tc.block; b != nil; b = b.parent {
		tags = append(tags, b.tags...)
	}
	return tags
}

// tagPattern finds busted's tags in describe and it names: "#slow".
var tagPattern = regexp.MustCompile(`#([A-Za-z0-9_][A-Za-z0-9_:.-]*)`)

func tagsOf(name string) []string {
	var out []string
	for _, m := range tagPattern.FindAllStringSubmatch(name, -1) {
		out = append(out, m[1])
	}
	return out
}

// hasSelected says whether a block holds a selected test.
func (f *fileRun) hasSelected(b *block) bool {
	for _, c := range b.children {
		switch x := c.(type) {
		case *testCase:
			if f.selected[x] {
				return true
			}
		case *block:
			if f.hasSelected(x) {
				return true
			}
		}
	}
	return false
}

// hasStrict says whether a block, or one inside it, has a strict setup
// or teardown, which runs even when none of its tests do.
func hasStrict(b *block) bool {
	if len(b.setups) > 0 || len(b.teardowns) > 0 {
		return true
	}
	for _, c := range b.children {
		if x, ok := c.(*block); ok && hasStrict(x) {
			return true
		}
	}
	return false
}

// order is the order a block's children run in: as declared, or
// shuffled with --shuffle.
func (f *fileRun) order(b *block) []any {
	out := append([]any{}, b.children...)
	if f.rng != nil {
		f.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}

// runBlock runs a block's setups, its tests and inner blocks, and its
// teardowns, as busted does: setup and teardown (strict) always, the
// lazy ones (before_all/after_all) only when a test of the block runs,
// once each; insulate blocks put the globals back when they end.
func (f *fileRun) runBlock(b *block) {
	selected := f.hasSelected(b)
	if !selected && !hasStrict(b) {
		return
	}
	if b.insulate {
		snap := f.snapshotGlobals()
		defer snap.restore()
	}
	var setupFail *Failure
	runHooks := func(hs []hookFn) {
		for _, h := range hs {
			if fl := f.callOutside(h.fn); fl != nil && setupFail == nil {
				fl.Message = "in " + h.kind + ": " + fl.Message
				setupFail = fl
			}
		}
	}
	runHooks(b.setups)
	lazyRan := false
	for _, c := range f.order(b) {
		if f.fileCtx.Err() != nil {
			break
		}
		switch x := c.(type) {
		case *testCase:
			if !f.selected[x] {
				continue
			}
			if !lazyRan && setupFail == nil {
				lazyRan = true
				runHooks(b.lazySetups)
			}
			if setupFail != nil {
				f.report(&TestResult{Name: x.fullName(), Line: x.line, Status: StatusFail, Failure: setupFail})
				continue
			}
			f.report(f.runTest(x))
		case *block:
			if setupFail != nil {
				f.failBlock(x, setupFail)
				continue
			}
			if !lazyRan && f.hasSelected(x) {
				lazyRan = true
				runHooks(b.lazySetups)
				if setupFail != nil {
					f.failBlock(x, setupFail)
					continue
				}
			}
			f.runBlock(x)
		}
	}
	var downFail *Failure
	downs := b.teardowns
	if lazyRan {
		downs = append(append([]hookFn{}, b.lazyTeardowns...), b.teardowns...)
	}
	for _, h := range downs {
		if fl := f.callOutside(h.fn); fl != nil && downFail == nil {
			fl.Message = "in " + h.kind + ": " + fl.Message
			downFail = fl
		}
	}
	// What the block's setups stubbed is put back when the block ends.
	f.spies.revertScope(b)
	if downFail != nil {
		name := strings.TrimSpace(blockName(b) + " (teardown)")
		f.report(&TestResult{Name: name, Line: b.line, Status: StatusFail, Failure: downFail})
	}
}

// failBlock reports every selected test of b as failed with fl.
func (f *fileRun) failBlock(b *block, fl *Failure) {
	for _, c := range b.children {
		switch x := c.(type) {
		case *testCase:
			if f.selected[x] {
				f.report(&TestResult{Name: x.fullName(), Line: x.line, Status: StatusFail, Failure: fl})
			}
		case *block:
			f.failBlock(x, fl)
		}
	}
}

func blockName(b *block) string {
	var parts []string
	for ; b != nil && b.parent != nil; b = b.parent {
		parts = append([]string{b.name}, parts...)
	}
	return strings.Join(parts, " ")
}

// report records a test's result and prints it.
func (f *fileRun) report(res *TestResult) {
	if f.acc != nil {
		f.acc.redactResult(res)
	}
	f.fr.Tests = append(f.fr.Tests, res)
	f.tap.test(f.file, res)
}

// callOutside runs a setup or teardown function (or the sweeper) under
// its own deadline.
func (f *fileRun) callOutside(fn *lua.LFunction, args ...lua.LValue) *Failure {
	ctx, cancel := context.WithTimeout(f.fileCtx, f.opts.Timeout)
	defer cancel()
	f.ctx = ctx
	f.sess.SetContext(ctx)
	defer func() {
		f.sess.SetContext(f.fileCtx)
		f.ctx = f.fileCtx
	}()
	f.L.Push(fn)
	for _, a := range args {
		f.L.Push(a)
	}
	if err := f.L.PCall(len(args), 0, nil); err != nil {
		return f.failureOf(err, ctx)
	}
	return nil
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
	f.interrupted = nil
	f.spies.enter(tc)
	acceptance := anyIn(tc.allTags(), []string{accTag})
	if acceptance {
		if skip := f.acc.start(tc); skip != "" {
			f.inTest = false
			f.sess.SetContext(f.fileCtx)
			f.ctx = f.fileCtx
			res.Status, res.Skip = StatusPending, skip
			return res
		}
		if f.acc.live {
			f.clock.setReal()
		}
	}
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
	// finally functions, the last registered first, whatever happened.
	for i := len(f.finally) - 1; i >= 0; i-- {
		had := failure != nil
		call(f.finally[i])
		if !had && failure != nil {
			failure.Message = "in finally: " + failure.Message
		}
	}
	f.finally = nil
	for i := len(blocks) - 1; i >= 0; i-- {
		for _, fn := range blocks[i].after {
			had := failure != nil
			call(fn)
			if !had && failure != nil {
				failure.Message = "in after_each: " + failure.Message
			}
		}
	}
	// Spies and stubs made during the test are put back.
	f.spies.revertScope(tc)
	if acceptance {
		if fl := f.acc.end(); fl != nil && failure == nil {
			failure = fl
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
// message, location and diff, or an error's message and traceback. A
// test that ran past --timeout while a hook ran is reported at the
// hook's own line.
func (f *fileRun) failureOf(err error, ctx context.Context) *Failure {
	if ctx.Err() != nil && f.fileCtx.Err() == nil {
		fl := &Failure{Message: fmt.Sprintf("test timed out after %s (loomd test --timeout bounds the real time of a test; hooks' own deadlines run on the virtual clock)", f.opts.Timeout), Traceback: traceOf(err)}
		if ie := f.interrupted; ie != nil {
			fl.Message += fmt.Sprintf(": %s was still running", ie.What)
			if ie.Where != "" {
				fl.Location = ie.Where
				fl.Message += " at " + ie.Where + " (a loop that never ends, or a wait with no deadline?)"
			}
			if ie.Traceback != "" {
				fl.Traceback = ie.Traceback
			}
		} else if loc := testFrame(fl.Traceback, f.file); loc != "" {
			fl.Location = loc
		}
		return fl
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

// testGlobals are what install puts in the test file's environment.
var testGlobals = []string{"describe", "context", "insulate", "expose", "it", "spec", "test", "pending",
	"before_each", "after_each", "setup", "teardown", "strict_setup", "strict_teardown", "lazy_setup", "lazy_teardown",
	"before_all", "after_all", "finally", "assert", "spy", "stub", "mock", "match", "loom"}

// install builds the test file's environment: busted's functions
// (describe, it, pending, the setups and teardowns, finally), assert,
// spy, stub, mock, match, and loom (what require("loom") gives, plus
// loom.test). It is a table of its own whose reads fall through to the
// VM's globals: the test sees the plugin's globals (its classname
// table), while the plugin's hooks, which run on the same VM, never see
// the test's (a plugin's own assert stays Lua's).
func (f *fileRun) install(L *lua.LState) {
	f.root = &block{}
	f.cur = f.root
	env := L.CreateTable(0, 32)
	envMeta := L.CreateTable(0, 1)
	envMeta.RawSetString("__index", L.G.Global)
	env.Metatable = envMeta
	f.env = env
	set := func(name string, fn lua.LGFunction) { env.RawSetString(name, L.NewFunction(fn)) }

	addBlock := func(kind string, insulate bool) lua.LGFunction {
		return func(L *lua.LState) int {
			name := ""
			var fn *lua.LFunction
			if s, ok := L.Get(1).(lua.LString); ok {
				name, fn = string(s), L.CheckFunction(2)
			} else if kind != "describe" {
				fn = L.CheckFunction(1) // insulate(fn), expose(fn)
			} else {
				L.ArgError(1, "describe(name, fn): want the block's name")
			}
			if !f.collecting {
				L.RaiseError("%s(%q) inside a running test: blocks belong at the top level or in other describe blocks", kind, name)
			}
			b := &block{name: name, line: whereLine(L, 1), parent: f.cur, tags: tagsOf(name), insulate: insulate}
			f.cur.children = append(f.cur.children, b)
			f.cur = b
			L.Push(fn)
			L.Call(0, 0)
			f.cur = b.parent
			return 0
		}
	}
	set("describe", addBlock("describe", false))
	set("context", addBlock("describe", false))
	set("insulate", addBlock("insulate", true))
	set("expose", addBlock("expose", false))
	addTest := func(L *lua.LState, pending bool) int {
		name := L.CheckString(1)
		if !f.collecting {
			if pending && f.inTest {
				// pending("reason") inside a test: it stops, reported
				// pending, as in busted.
				raiseSkip(L, "pending: "+name)
			}
			L.RaiseError("it(%q) inside a running test: it blocks belong at the top level or in describe blocks", name)
		}
		fn, _ := L.Get(2).(*lua.LFunction)
		tc := &testCase{name: name, line: whereLine(L, 1), block: f.cur, fn: fn, pending: pending || fn == nil, tags: tagsOf(name)}
		f.cur.children = append(f.cur.children, tc)
		f.tests = append(f.tests, tc)
		return 0
	}
	set("it", func(L *lua.LState) int { return addTest(L, false) })
	set("spec", func(L *lua.LState) int { return addTest(L, false) })
	set("test", func(L *lua.LState) int { return addTest(L, false) })
	set("pending", func(L *lua.LState) int { return addTest(L, true) })
	each := func(after bool) lua.LGFunction {
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
	set("before_each", each(false))
	set("after_each", each(true))
	once := func(kind string) lua.LGFunction {
		return func(L *lua.LState) int {
			fn := L.CheckFunction(1)
			if !f.collecting {
				L.RaiseError("%s inside a running test: call it in a describe block or at the top level", kind)
			}
			h := hookFn{fn: fn, line: whereLine(L, 1), kind: kind}
			b := f.cur
			switch kind {
			case "setup", "strict_setup":
				b.setups = append(b.setups, h)
			case "lazy_setup", "before_all":
				b.lazySetups = append(b.lazySetups, h)
			case "teardown", "strict_teardown":
				b.teardowns = append(b.teardowns, h)
			case "lazy_teardown", "after_all":
				b.lazyTeardowns = append(b.lazyTeardowns, h)
			}
			return 0
		}
	}
	for _, k := range []string{"setup", "strict_setup", "lazy_setup", "before_all", "teardown", "strict_teardown", "lazy_teardown", "after_all"} {
		set(k, once(k))
	}
	set("finally", func(L *lua.LState) int {
		fn := L.CheckFunction(1)
		if !f.inTest {
			L.RaiseError("finally outside a test: call it inside an it block (it runs when the test ends, pass or fail)")
		}
		f.finally = append(f.finally, fn)
		return 0
	})
	env.RawSetString("assert", newAssert(L, f))
	f.installSpies(L, env)

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
	env.RawSetString("loom", loomT)
	// require("loom.test") gives loom.test too.
	env.RawSetString("require", L.NewFunction(func(L *lua.LState) int {
		if L.CheckString(1) == "loom.test" {
			L.Push(loomT.RawGetString("test"))
			return 1
		}
		L.Push(L.GetGlobal("require"))
		L.Push(L.Get(1))
		L.Call(1, 1)
		return 1
	}))
}

// globalsSnap is what an insulate block puts back: the test's globals,
// the VM's globals and its loaded modules, each as a shallow copy.
type globalsSnap struct {
	tables []*lua.LTable
	saved  []map[lua.LValue]lua.LValue
}

func (f *fileRun) snapshotGlobals() *globalsSnap {
	s := &globalsSnap{}
	for _, t := range []*lua.LTable{f.env, f.L.G.Global, f.sess.Modules()} {
		m := map[lua.LValue]lua.LValue{}
		t.ForEach(func(k, v lua.LValue) { m[k] = v })
		s.tables = append(s.tables, t)
		s.saved = append(s.saved, m)
	}
	return s
}

func (s *globalsSnap) restore() {
	for i, t := range s.tables {
		saved := s.saved[i]
		var drop []lua.LValue
		t.ForEach(func(k, _ lua.LValue) {
			if _, ok := saved[k]; !ok {
				drop = append(drop, k)
			}
		})
		for _, k := range drop {
			t.RawSet(k, lua.LNil)
		}
		for k, v := range saved {
			if t.RawGet(k) != v {
				t.RawSet(k, v)
			}
		}
	}
}
