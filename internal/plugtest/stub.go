package plugtest

// Stub is the LuaLS definition file of the test API (describe, it,
// assert, loom.test), which loomd new writes beside the bindings' stubs so
// an editor completes and checks *_test.lua files too.
const Stub = `---@meta loom.test
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

---@class loomtest.assert
---@overload fun(v: any, msg?: string): any
assert = {}
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
---@param opts? {type?: string, fields?: table, config?: table, steps?: (string|table)[], stop_on_failure?: boolean}
---@return loomtest.Chain
function test.chain(opts) end
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
`
