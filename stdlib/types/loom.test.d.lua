---@meta loom.test
-- The API of *_test.lua files run by loomd test (docs/testing.md).
-- Written by loomd new. Do not edit.

---@param name string
---@param fn fun()
function describe(name, fn) end
---@param name string
---@param fn? fun()
function it(name, fn) end
---@param name string
function pending(name) end
---@param fn fun()
function before_each(fn) end
---@param fn fun()
function after_each(fn) end
---@param fn fun()
function setup(fn) end
---@param fn fun()
function teardown(fn) end
---@param fn fun()
function strict_setup(fn) end
---@param fn fun()
function strict_teardown(fn) end
---@param fn fun()
function lazy_setup(fn) end
---@param fn fun()
function lazy_teardown(fn) end
---@param fn fun()
function before_all(fn) end
---@param fn fun()
function after_all(fn) end
---@param fn fun()
function finally(fn) end
---@param name string|fun()
---@param fn? fun()
function insulate(name, fn) end
---@param name string|fun()
---@param fn? fun()
function expose(name, fn) end
---@param name string
---@param fn fun()
function context(name, fn) end

---@class loomtest.Spy
---@field calls {vals: any[], refs: any[], n: integer}[]
---@field returnvals {vals: any[], n: integer}[]
---@field callback? function
---@field target_table? table
---@field target_key? any
---@overload fun(...): ...
local Spy = {}
---@return any original
function Spy:revert() end
---@return loomtest.Spy
function Spy:clear() end
---@param times? integer
---@return boolean, integer
function Spy:called(times) end
---@param ... any
---@return boolean
function Spy:called_with(...) end
---@param ... any
---@return boolean
function Spy:returned_with(...) end
---@param ... any
---@return loomtest.Spy
function Spy.returns(...) end
---@param fn function
---@return loomtest.Spy
function Spy.invokes(fn) end
---@param ... any
---@return {returns: fun(...): loomtest.Spy, invokes: fun(fn: function): loomtest.Spy}
function Spy.on_call_with(...) end
---@type {returns: fun(...): loomtest.Spy, invokes: fun(fn: function): loomtest.Spy}
Spy.by_default = nil

---@class loomtest.spy
---@overload fun(fn: function): loomtest.Spy
spy = {}
---@param fn function
---@return loomtest.Spy
function spy.new(fn) end
---@param tbl table
---@param key any
---@return loomtest.Spy
function spy.on(tbl, key) end
---@param v any
---@return boolean
function spy.is_spy(v) end

---@class loomtest.stub
---@overload fun(tbl: table, key: any, ...: any): loomtest.Spy
stub = {}
---@param tbl table
---@param key any
---@param ... any
---@return loomtest.Spy
function stub.new(tbl, key, ...) end
---@param v any
---@return boolean
function stub.is_stub(v) end

---@class loomtest.mock
---@overload fun(tbl: table, dostub?: boolean): table
mock = {}
---@param tbl table
---@return table
function mock.revert(tbl) end

--- Matchers for called_with, returned_with, on_call_with and assert.same:
--- match._, match.is_string(), match.is_table(), match.is_same(v), match.is_not_nil(), ...
---@type table<string, any>
match = {}

--- luassert's assert: assert.equals(...), and chains of words such as
--- assert.is_not.equal(a, b), assert.has_no.errors(fn),
--- assert.spy(s).was.called_with(...), assert.stub(s).was_not.called().
---@class loomtest.assert
---@overload fun(v: any, msg?: string): any
---@field [string] any
assert = {}
---@param expected number
---@param actual number
---@param tolerance number
---@param msg? string
function assert.near(expected, actual, tolerance, msg) end
---@param list table
---@param msg? string
function assert.unique(list, msg) end
---@param fn fun()
---@param pattern string
---@param msg? string
---@return any err
function assert.error_matches(fn, pattern, msg) end
---@param s loomtest.Spy|function
---@return table
function assert.spy(s) end
---@param s loomtest.Spy|function
---@return table
function assert.stub(s) end
---@param expected any
---@param actual any
---@param msg? string
function assert.equals(expected, actual, msg) end
---@param a any
---@param b any
---@param msg? string
function assert.not_equals(a, b, msg) end
---@param expected any
---@param actual any
---@param msg? string
function assert.same(expected, actual, msg) end
---@param a any
---@param b any
---@param msg? string
function assert.not_same(a, b, msg) end
---@param v any
---@param msg? string
function assert.truthy(v, msg) end
---@param v any
---@param msg? string
function assert.falsy(v, msg) end
---@param v any
---@param msg? string
function assert.is_true(v, msg) end
---@param v any
---@param msg? string
function assert.is_false(v, msg) end
---@param v any
---@param msg? string
function assert.is_nil(v, msg) end
---@param v any
---@param msg? string
function assert.not_nil(v, msg) end
---@param pattern string
---@param s string
---@param msg? string
function assert.matches(pattern, s, msg) end
---@param needle any
---@param haystack string|table
---@param msg? string
function assert.contains(needle, haystack, msg) end
---@param fn fun()
---@param expected? string|table
---@param msg? string
---@return any err
function assert.errors(fn, expected, msg) end
---@param msg? string
function assert.fail(msg) end

---@class loomtest.TaskOptions
---@field type? string
---@field fields? table
---@field config? table
---@field id? string
---@field node? string
---@field tenant? string
---@field hostname? string
---@field providerid? string
---@field ipaddress? string
---@field sshauth? table
---@field service? string

---@class loomtest.Result
---@field status integer
---@field message? string
---@field stdout? string
---@field stderr? string
---@field result? table
---@field ipaddresses? table
---@field hostname? string
---@field error? table

---@class loomtest.Chain
---@field ok boolean
---@field failed? string
---@field results table<string, loomtest.Result>
---@field tasks table<string, table>
---@field order string[]
---@field config table
---@field leftovers string[]
---@field again? table<string, loomtest.Result>
---@field changes? table<string, string[]>

---@class loomtest.Request
---@field method string
---@field path string
---@field host string
---@field query table<string, string>
---@field headers table<string, string>
---@field body string
---@field json? any
---@field params table<string, string>
---@field route? string
---@field status integer

---@alias loomtest.Response {status?: integer, json?: any, body?: string, headers?: table<string, string>, delay?: number, drop?: boolean}|integer|string

---@class loomtest.HTTPFake
---@field url string
---@field host string
---@field hosts string[]
local HTTPFake = {}
---@param method string
---@param path string
---@param answer loomtest.Response|loomtest.Response[]|fun(req: loomtest.Request): any
---@return loomtest.HTTPFake
function HTTPFake:route(method, path, answer) end
---@param opts {status?: integer, times?: integer, method?: string, path?: string, headers?: table, json?: any, body?: string, delay?: number, drop?: boolean}
function HTTPFake:fail_next(opts) end
---@param method? string
---@param path? string
---@return loomtest.Request[]
function HTTPFake:requests(method, path) end
---@param method? string
---@param path? string
---@return loomtest.Request?
function HTTPFake:last(method, path) end
---@param method string
---@param path string
---@param times? integer
---@return loomtest.Request[]
function HTTPFake:assert_called(method, path, times) end
---@param method string
---@param path string
function HTTPFake:assert_not_called(method, path) end
function HTTPFake:reset() end
function HTTPFake:close() end

---@alias loomtest.SSHAnswer {stdout?: string, stderr?: string, exit_code?: integer, signal?: string, delay?: number}|integer|string

---@class loomtest.SSHCommand
---@field kind string
---@field command string
---@field user string
---@field login string
---@field sudo boolean
---@field env table<string, string>
---@field stdin string
---@field pty boolean
---@field captures string[]
---@field exit_code? integer
---@field stdout? string
---@field stderr? string
---@field matched? string
---@field builtin? string
---@field path? string
---@field bytes? integer
---@field method? string

---@class loomtest.SSHStat
---@field kind "file"|"dir"|"link"
---@field mode string
---@field owner string
---@field group string
---@field size? integer
---@field content? string
---@field target? string

---@class loomtest.SSHFake
---@field host string
---@field hosts string[]
---@field port integer
---@field host_key string
---@field fingerprint string
---@field known_hosts string
local SSHFake = {}
---@param command string
---@param answer loomtest.SSHAnswer|loomtest.SSHAnswer[]|fun(cmd: loomtest.SSHCommand): loomtest.SSHAnswer?
---@return loomtest.SSHFake
function SSHFake:on(command, answer) end
---@param command? string
---@return loomtest.SSHCommand[]
function SSHFake:commands(command) end
---@param command? string
---@return loomtest.SSHCommand?
function SSHFake:last(command) end
---@param command string
---@param times? integer
---@return loomtest.SSHCommand[]
function SSHFake:assert_ran(command, times) end
---@param command string
function SSHFake:assert_not_ran(command) end
---@param path string
---@return string?
function SSHFake:file(path) end
---@param path string
---@return loomtest.SSHStat?
function SSHFake:stat(path) end
---@param dir? string
---@return string[]
function SSHFake:files(dir) end
---@param path string
---@param content string
---@param opts? {mode?: string, owner?: string, group?: string}
function SSHFake:write(path, content, opts) end
---@param path string
function SSHFake:mkdir(path) end
---@param path string
function SSHFake:remove(path) end
---@param kind? "login"|"exec"|"upload"|"download"|"tunnel"|"cleanup"
---@return loomtest.SSHCommand[]
function SSHFake:interactions(kind) end
function SSHFake:reset() end
function SSHFake:close() end

---@class loomtest.SSHD
---@field host string
---@field port integer
---@field user string
---@field nopasswd_user string
---@field password string
---@field key string
---@field host_keys table<string, string>
---@field sshauth {user: string, password: string, port: integer}

---@class loomtest.Clock
local Clock = {}
---@return number[] seconds
function Clock.sleeps() end
---@return number seconds
function Clock.slept() end
---@return number epoch_seconds
function Clock.now() end
---@param seconds number
---@return number epoch_seconds
function Clock.advance(seconds) end
---@param epoch_seconds number
function Clock.set(epoch_seconds) end
function Clock.real() end

---@class loomtest
---@field clock loomtest.Clock
---@field type string
---@field family string
---@field plugin string
---@field plugin_dir string
---@field work_dir string
---@field file string
local test = {}
---@param name string
---@param opts? loomtest.TaskOptions
---@return table task
function test.task(name, opts) end
---@param task table|string
---@param opts? loomtest.TaskOptions
---@return loomtest.Result result
---@return string[] logs
function test.run(task, opts) end
---@param opts? {type?: string, fields?: table, config?: table, steps?: (string|table)[], stop_on_failure?: boolean, idempotent?: boolean}
---@return loomtest.Chain
function test.chain(opts) end
---@class loomtest.Acceptance
---@field env table<string, string> the declared values: inside #acceptance tests and the sweeper only
---@field prefix string starts the names of what acceptance tests make
---@field live boolean
---@field replay boolean
local Acc = {}
---@param kind string
---@param id string|number
function Acc:track(kind, id) end
---@param opts {env?: string[], optional?: table<string, string>, hosts?: string[], sweeper?: fun(s: {prefix: string, tracked: {kind: string, id: string}[], env: table<string, string>})}
---@return loomtest.Acceptance
function test.acceptance(opts) end
---@param opts? {host?: string, hosts?: string[], permit?: boolean, strict?: boolean, routes?: table}
---@return loomtest.HTTPFake
function test.http(opts) end
---@param opts? {host?: string, hosts?: string[], port?: integer, user?: string, password?: string, keys?: string[], sudo?: boolean|{password: string}, commands?: table<string, loomtest.SSHAnswer|loomtest.SSHAnswer[]|function>, files?: table<string, string|{content?: string, mode?: string, owner?: string, group?: string}>, tar?: boolean, known?: boolean, strict?: boolean, env?: table<string, string>}
---@return loomtest.SSHFake
function test.ssh(opts) end
---@return loomtest.SSHD
function test.sshd() end
---@return string[]
function test.files() end

---@class loomtest.loom
---@field test loomtest
loom = {}
