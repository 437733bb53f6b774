-- Tests for the shell automator, run by `loomd test plugins/shell`: the
-- node is an SSH fake host (loom.test.ssh), so no sshd and no network.
local fs = require("loom.fs")

local CACHE = "/var/cache/loom/shell"
local ADDR = "10.0.0.5"

-- A node reached as root with a password, as a Coopr task describes it.
local function node(opts)
  opts = opts or {}
  opts.host = opts.host or ADDR
  return loom.test.ssh(opts)
end

local function task(name, fields, auth)
  return loom.test.task(name, {
    ipaddress = ADDR,
    sshauth = auth or { user = "root", password = "pw" },
    fields = fields,
  })
end

describe("BOOTSTRAP", function()
  before_each(function()
    fs.mkdir("scripts")
    fs.write("scripts/hello.sh", "#!/bin/sh\necho hello \"$@\"\n", { mode = "0755" })
  end)

  it("ships scripts and the shell library in one tar stream, then swaps them in", function()
    local host = node()
    host:on("^set %-e\ncache=", 0) -- the swap, run after the trees are extracted
    local res = loom.test.run(task("BOOTSTRAP"))
    assert.equals(0, res.status, res.message)
    assert.matches("shipped scripts, lib", res.stdout)
    -- One tar stream into a staging dir: the scripts and lib arrived there.
    local staged = host:interactions("exec")
    local tar = nil
    for _, r in ipairs(staged) do
      if r.builtin == "tar" then tar = r end
    end
    assert.not_nil(tar, "no tar upload")
    assert.matches("^" .. CACHE .. "/%.incoming%.", tar.path)
    assert.equals("#!/bin/sh\necho hello \"$@\"\n", host:file(tar.path .. "/scripts/hello.sh"))
    assert.equals("0755", host:stat(tar.path .. "/scripts/hello.sh").mode)
    assert.not_nil(host:file(tar.path .. "/lib/loom-wrapper.sh"))
    -- The swap ran once, as root (no sudo), on the same connection.
    host:assert_ran("^set %-e\ncache=" .. CACHE:gsub("%p", "%%%0"), 1)
    assert.equals(1, #host:interactions("login"))
  end)

  it("goes through sudo for a user other than root, with the SSH password", function()
    local host = node({ sudo = { password = "pw" } })
    host:on("^set %-e\ncache=", 0)
    local res = loom.test.run(task("BOOTSTRAP", nil, { user = "deploy", password = "pw" }))
    assert.equals(0, res.status, res.message)
    local swap = host:last("^set %-e")
    assert.is_true(swap.sudo)
    assert.equals("root", swap.user)
    assert.equals("deploy", swap.login)
  end)

  it("fails with the node and a hint when the swap fails", function()
    local host = node()
    host:on("^set %-e\ncache=", { stderr = "mv: cannot move: No space left on device\n", exit_code = 1 })
    local res = loom.test.run(task("BOOTSTRAP"))
    assert.equals(1, res.status)
    assert.matches("root@10%.0%.0%.5:22", res.message)
    assert.matches("No space left on device", res.message)
  end)

  it("reports a node nobody answers for", function()
    local res = loom.test.run(task("BOOTSTRAP"))
    assert.equals(1, res.status)
    assert.matches("connecting on root@10%.0%.0%.5:22", res.message)
    assert.matches("no SSH fake serves 10%.0%.0%.5:22", res.message)
  end)

  it("refuses a node whose host key is not known", function()
    node({ known = false })
    local res = loom.test.run(task("BOOTSTRAP"))
    assert.equals(1, res.status)
    assert.matches("host key", res.message)
  end)

  it("trusts a node by the keys the provider pinned (config.ssh_host_keys)", function()
    local host = node({ known = false })
    host:on("^set %-e", 0)
    local t = task("BOOTSTRAP")
    t.config.ssh_host_keys = { ed25519 = host.host_key }
    local res = loom.test.run(t)
    assert.equals(0, res.status, res.message)
  end)
end)

describe("service actions", function()
  local fields = { script = "hello.sh", args = "'big world' two", cache_dir = CACHE }

  -- The wrapper command of a service action, up to the script's words.
  local WRAPPER = "^%[ %-f " .. CACHE:gsub("%p", "%%%0") .. "/lib/loom%-wrapper%.sh %]"

  it("runs the script with its arguments split like shell words, and returns its output", function()
    local host = node()
    host:on(WRAPPER, { stdout = "hello big world two\n" })
    local res = loom.test.run(task("INSTALL", fields))
    assert.equals(0, res.status, res.message)
    assert.equals("hello big world two\n", res.stdout)
    local run = host:last(WRAPPER)
    assert.matches("exec sh " .. CACHE .. "/lib/loom%-wrapper%.sh hello%.sh 'big world' two$", run.command)
    assert.is_false(run.sudo)
  end)

  it("hands the task JSON to the script on stdin, never on the command line", function()
    local host = node()
    host:on(WRAPPER, 0)
    local t = task("CONFIGURE", fields)
    t.config.secret_thing = "s3cr3t"
    loom.test.run(t)
    local run = host:last(WRAPPER)
    assert.matches('"secret_thing":"s3cr3t"', run.stdin)
    assert.falsy(run.command:find("s3cr3t", 1, true))
  end)

  it("under sudo, passes the login user's environment along (sudo -E as Coopr did), in one command", function()
    local host = node({ env = { LANG = "C.UTF-8", LD_PRELOAD = "/evil.so" } })
    host:on(WRAPPER, 0)
    local res = loom.test.run(task("START", fields, { user = "deploy", password = "pw" }))
    assert.equals(0, res.status, res.message)
    local run = host:last(WRAPPER)
    assert.is_true(run.sudo)
    assert.equals("C.UTF-8", run.env.LANG)
    assert.is_nil(run.env.LD_PRELOAD) -- sudo never passes the loader's variables on
    assert.equals(1, #host:commands()) -- the environment was read in the script's own session
    -- With sudo_env off, sudo's own environment.
    host:reset()
    fields.sudo_env = "false"
    res = loom.test.run(task("START", fields, { user = "deploy", password = "pw" }))
    fields.sudo_env = nil
    assert.equals(0, res.status, res.message)
    assert.is_nil(host:last(WRAPPER).env.LANG)
  end)

  it("fails with the script's output when it exits non-zero", function()
    local host = node()
    host:on(WRAPPER, { stdout = "partial\n", stderr = "boom\n", exit_code = 3 })
    local res = loom.test.run(task("INSTALL", fields))
    assert.equals(1, res.status)
    assert.matches("hello%.sh exited with status 3", res.message)
    assert.equals("partial\n", res.stdout)
    assert.matches("boom", res.stderr)
  end)

  it("stops a script past fields.timeout and removes its task data", function()
    local host = node()
    host:on(WRAPPER, { delay = 30 })
    local res = loom.test.run(task("INSTALL", { script = "hello.sh", cache_dir = CACHE, timeout = "0.2" }))
    assert.equals(1, res.status)
    assert.matches("timed out", res.message)
    local cleanups = host:interactions("cleanup")
    assert.equals(1, #cleanups)
    assert.matches("^rm %-rf %-%- " .. CACHE:gsub("%p", "%%%0") .. "/run/task%.%*%.", cleanups[1].command)
  end)

  it("ships the library first when the node lacks it, then runs the script", function()
    local host = node()
    fs.mkdir("scripts")
    fs.write("scripts/hello.sh", "echo hi\n")
    host:on(WRAPPER, {
      { stderr = "loom-shell: library missing\n", exit_code = 97 },
      { stdout = "hi\n" },
    })
    host:on("^set %-e\ncache=", 0)
    local res = loom.test.run(task("INSTALL", fields))
    assert.equals(0, res.status, res.message)
    assert.equals("hi\n", res.stdout)
    host:assert_ran(WRAPPER, 2)
    host:assert_ran("^set %-e\ncache=", 1)
  end)

  it("refuses arguments with an unbalanced quote before connecting", function()
    local host = node()
    local res = loom.test.run(task("INSTALL", { script = "hello.sh", args = "'oops", cache_dir = CACHE }))
    assert.equals(1, res.status)
    assert.matches("unbalanced ' quote", res.message)
    assert.same({}, host:commands())
  end)
end)

describe("on a real sshd (loomd test --sshd)", function()
  it("ships the library and runs a script through sudo", function()
    local node = loom.test.sshd()
    fs.mkdir("scripts")
    fs.write("scripts/hello.sh", "#!/bin/sh\necho \"hello $1 from $(id -un)\"\n", { mode = "0755" })
    local cache = "/tmp/loom-shell-test-" .. math.random(1e9)
    local boot = loom.test.run("BOOTSTRAP", { ipaddress = node.host, sshauth = node.sshauth,
      config = { service = { action = { fields = { cache_dir = cache } } } } })
    assert.equals(0, boot.status, boot.message)
    local res = loom.test.run("INSTALL", { ipaddress = node.host, sshauth = node.sshauth,
      fields = { script = "hello.sh", args = "'big world'", cache_dir = cache } })
    assert.equals(0, res.status, res.message)
    assert.equals("hello big world from root\n", res.stdout)
    local rm = loom.test.run("REMOVE", { ipaddress = node.host, sshauth = node.sshauth,
      fields = { script = "rm", args = "-rf " .. cache, cache_dir = cache } })
    assert.equals(0, rm.status, rm.message)
  end)
end)
