-- Tests for the chef-solo automator, run by `loomd test plugins/chef-solo`
-- (and by `make test`), against an SSH fake node whose shell steps are
-- played by handlers here: the probe, the swap that installs shipped
-- resources, Chef's install, and chef-solo itself, which checks its command
-- line and reads the attributes JSON from stdin's file. The Go tests
-- (chefsolo_test.go) run the same hooks on real sshd hosts with a strict
-- fake chef-solo executable.

local fs = require("loom.fs")
local json = require("loom.json")
local attributes = require("lib.chef.attributes")

local HOST = "10.0.0.7"
local DIR = "/var/chef"
local PASSWORD = "ssh-Passw0rd-chef"

local node, chef

local crypto = require("loom.crypto")

-- node_digest is what the plugin's probe computes on a real node: the
-- SHA-256 of `sha256sum` lines of every file under the three dirs, sorted
-- by path.
local function node_digest(dir)
  local lines = {}
  for _, d in ipairs({ "cookbooks", "data_bags", "roles" }) do
    for _, f in ipairs(node:files(dir .. "/" .. d)) do
      local st = node:stat(f)
      if st and st.kind == "file" then
        local rel = f:sub(#dir + 2)
        lines[#lines + 1] = { rel, crypto.sha256(node:file(f)) .. "  " .. rel .. "\n" }
      end
    end
  end
  table.sort(lines, function(a, b) return a[1] < b[1] end)
  local out = {}
  for i, l in ipairs(lines) do out[i] = l[2] end
  return crypto.sha256(table.concat(out))
end

local function words(cmd)
  local out, i, n = {}, 1, #cmd
  while i <= n do
    if cmd:sub(i, i):match("%s") then
      i = i + 1
    else
      local w = ""
      while i <= n and not cmd:sub(i, i):match("%s") do
        local c = cmd:sub(i, i)
        if c == "'" then
          local j = cmd:find("'", i + 1, true)
          w = w .. cmd:sub(i + 1, j - 1)
          i = j + 1
        elseif c == "\\" then
          w = w .. cmd:sub(i + 1, i + 1)
          i = i + 2
        else
          w = w .. c
          i = i + 1
        end
      end
      out[#out + 1] = w
    end
  end
  return out
end

-- new_node plays a node: chef = {installed, runs, installs, fail_with}.
local function new_node(opts)
  opts = opts or {}
  if node then node:close() end
  chef = { installed = opts.installed ~= false, runs = {}, installs = 0, install_errors = opts.install_errors or {} }
  node = loom.test.ssh({ host = HOST, sudo = { password = PASSWORD } })
  -- The probe: chef-solo's path, and the digest of the node's copy, as
  -- sha256sum lines of its files sorted by path.
  node:on("^PATH=\"%$PATH:/opt/chef/bin:/opt/cinc/bin\"; dir=", function(cmd)
    local dir = cmd.command:match("; dir=(%S+)\n")
    local out = chef.installed and "chef-solo=/usr/bin/chef-solo\n" or ""
    if node:file(dir .. "/loom-solo.rb") then out = out .. "digest=" .. node_digest(dir) .. "\n" end
    return { stdout = out }
  end)
  -- The swap after the tar stream: what the shell would do, in the fake's
  -- filesystem: each staged tree replaces the node's, solo.rb is written.
  local function swap(cmd)
    local dir, staging = cmd.command:match("\ndir=(%S+); new=(%S+)\n")
    for _, d in ipairs({ "cookbooks", "data_bags", "roles" }) do
      for _, f in ipairs(node:files(dir .. "/" .. d)) do node:remove(f) end
      for _, f in ipairs(node:files(staging .. "/" .. d)) do
        node:write(dir .. "/" .. d .. f:sub(#staging + #d + 2), node:file(f))
      end
    end
    for _, f in ipairs(node:files(staging)) do node:remove(f) end
    node:write(dir .. "/loom-solo.rb", cmd.command:match("<<'LOOM_SOLO_RB'\n(.-)LOOM_SOLO_RB"))
    chef.swaps = (chef.swaps or 0) + 1
    return 0
  end
  node:on("^set %-e\ndir=", swap)
  node:on("^mkdir %-p ", swap) -- a shipping without resources: the same swap, after a mkdir
  -- Chef's install (yum, apt, then the installer script).
  node:on("^PATH=\"%$PATH:/opt/chef/bin:/opt/cinc/bin\"\nif command %-v yum", function()
    chef.installs = chef.installs + 1
    local e = table.remove(chef.install_errors, 1)
    if e then return { exit_code = 100, stderr = e } end
    chef.installed = true
    return { stdout = "Thank you for installing Chef!\n" }
  end)
  -- A chef-solo run: the plugin's script checks the shipping, writes stdin
  -- to the -j file, runs chef-solo, removes the file.
  node:on("^PATH=\"%$PATH:/opt/chef/bin:/opt/cinc/bin\"; export PATH\n", function(cmd)
    local dir = cmd.command:match("%[ %-f (%S+)/loom%-solo%.rb %]")
    if not node:file(dir .. "/loom-solo.rb") then
      return { exit_code = 97, stderr = "loom-chef-solo: resources not shipped\n" }
    end
    if not chef.installed then return { exit_code = 98, stderr = "loom-chef-solo: chef-solo not found\n" } end
    local line = cmd.command:match("\n(chef%-solo [^\n]*); rc=%$%?")
    local argv = words(line)
    local run = { argv = argv, user = cmd.user, stdin = cmd.stdin }
    for i = 1, #argv do
      if argv[i] == "-c" then run.config = argv[i + 1] end
      if argv[i] == "-j" then run.json = argv[i + 1] end
      if argv[i] == "-o" then run.run_list = argv[i + 1] end
      if argv[i] == "-l" then run.log_level = argv[i + 1] end
    end
    assert(run.config == dir .. "/loom-solo.rb", "chef-solo -c " .. tostring(run.config))
    assert(run.json and run.json:match("^" .. dir:gsub("%p", "%%%0") .. "/%.loom%-run/.+%.json$"), "chef-solo -j " .. tostring(run.json))
    assert(cmd.command:find("cat > " .. run.json, 1, true), "the JSON is not written to the -j file")
    assert(cmd.command:find("rm -f " .. run.json, 1, true), "the JSON file is not removed")
    run.attrs = json.decode(cmd.stdin)
    chef.runs[#chef.runs + 1] = run
    if chef.fail_with then
      return { exit_code = 1, stdout = "Starting Chef Client, version 12.21.3\n" .. chef.fail_with }
    end
    return { stdout = "Starting Chef Client, version 12.21.3\nChef Client finished, 2/5 resources updated in 03 seconds\n" }
  end)
  return node
end

local function auth()
  return { user = "deploy", password = PASSWORD }
end

local function write_resources()
  fs.write("cookbooks/hello/metadata.rb", "name 'hello'\nversion '1.0.0'\n")
  fs.write("cookbooks/hello/recipes/default.rb", "file '/tmp/hello' do\n  content node['hello']['greeting']\nend\n")
  fs.write("roles/web.json", json.encode({ name = "web", json_class = "Chef::Role", chef_type = "role",
    run_list = { "recipe[hello]" } }))
end

local function bootstrap(extra)
  local opts = { ipaddress = HOST, sshauth = auth() }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return loom.test.run("BOOTSTRAP", opts)
end

local function tar_uploads()
  local n = 0
  for _, r in ipairs(node:interactions("exec")) do
    if r.builtin == "tar" then n = n + 1 end
  end
  return n
end

describe("BOOTSTRAP", function()
  before_each(function()
    write_resources()
    new_node()
  end)

  it("ships cookbooks and roles in one tar stream, then swaps them in as root", function()
    local res = bootstrap()
    assert.equals(0, res.status, res.message)
    assert.matches("shipped cookbooks, roles %(3 files%) to /var/chef", res.stdout)
    assert.equals(1, tar_uploads())
    local swap = node:last("^set %-e\ndir=")
    assert.equals("root", swap.user)
    assert.equals("deploy", swap.login)
    -- the tree arrived in the staging dir the swap moves into place
    local tar
    for _, r in ipairs(node:interactions("exec")) do
      if r.builtin == "tar" then tar = r end
    end
    assert.matches("^/var/chef/%.incoming%.", tar.path)
    -- the swap moved it into place (and the staging dir is gone)
    assert.equals("name 'hello'\nversion '1.0.0'\n", node:file(DIR .. "/cookbooks/hello/metadata.rb"))
    assert.truthy(node:file(DIR .. "/roles/web.json"))
    assert.same({}, node:files(tar.path))
    assert.matches('cookbook_path %["/var/chef/cookbooks"%]', node:file(DIR .. "/loom-solo.rb"))
  end)

  it("ships once per host: run again, it finds the same digest and sends nothing", function()
    assert.equals(0, bootstrap().status)
    local again = bootstrap()
    assert.equals(0, again.status, again.message)
    assert.matches("resources current %(3 files%)", again.stdout)
    assert.equals(1, tar_uploads())
    assert.equals(1, chef.swaps)
  end)

  it("ships again when the node's copy was changed by hand", function()
    assert.equals(0, bootstrap().status)
    node:write(DIR .. "/cookbooks/hello/recipes/default.rb", "log 'edited on the node'\n")
    local again = bootstrap()
    assert.equals(0, again.status, again.message)
    assert.matches("shipped", again.stdout)
    assert.equals(2, tar_uploads())
    assert.matches("^file", node:file(DIR .. "/cookbooks/hello/recipes/default.rb"))
  end)

  it("ships again when a cookbook changed", function()
    assert.equals(0, bootstrap().status)
    fs.write("cookbooks/hello/recipes/default.rb", "log 'changed'\n")
    local again = bootstrap()
    assert.equals(0, again.status, again.message)
    assert.matches("shipped", again.stdout)
    assert.equals(2, tar_uploads())
  end)

  it("installs Chef when the node has no chef-solo", function()
    new_node({ installed = false })
    local res = bootstrap()
    assert.equals(0, res.status, res.message)
    assert.matches("installed Chef", res.stdout)
    local install = node:last("^PATH=\"%$PATH:/opt/chef/bin:/opt/cinc/bin\"\nif command %-v yum")
    assert.equals("root", install.user)
    assert.matches("sh \"%$tmp\" %-v 12%.21%.3", install.command)
    assert.matches("https://omnitruck%.chef%.io/install%.sh", install.command)
  end)

  it("waits on the virtual clock while cloud-init holds the package manager's lock", function()
    new_node({ installed = false, install_errors = {
      "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 812 (apt-get)\n" } })
    local res = bootstrap()
    assert.equals(0, res.status, res.message)
    assert.equals(2, chef.installs)
    assert.same({ 10 }, loom.test.clock.sleeps())
  end)

  it("fails with the installer's reason when Chef cannot be installed", function()
    new_node({ installed = false, install_errors = { "curl: (6) Could not resolve host: omnitruck.chef.io\n" } })
    local res = bootstrap()
    assert.equals(1, res.status)
    assert.matches("installing Chef on deploy@10%.0%.0%.7:22", res.message)
    assert.matches("Could not resolve host", res.message)
  end)

  it("refuses to install Chef when install_chef is never", function()
    new_node({ installed = false })
    local res = bootstrap({ config = { service = { action = { fields = { install_chef = "never" } } } } })
    assert.equals(1, res.status)
    assert.matches("install_chef is never", res.message)
    assert.equals(0, chef.installs)
  end)

  it("reports a node whose SSH login is refused, without the password", function()
    node:close()
    node = loom.test.ssh({ host = HOST, password = "another" })
    local res, logs = bootstrap()
    assert.equals(1, res.status)
    assert.matches("connecting on deploy@10%.0%.0%.7:22", res.message)
    assert.falsy(json.encode(res):find(PASSWORD, 1, true))
    assert.falsy(table.concat(logs, "\n"):find(PASSWORD, 1, true))
  end)
end)

describe("service actions", function()
  local cluster = { hadoop = { core = { fs = "hdfs://nn:8020", replication = 3 }, dirs = { "/a", "/b" } },
    db_password = "cluster-Secret-value" }

  before_each(function()
    write_resources()
    new_node()
    assert.equals(0, bootstrap().status)
  end)

  local function action(name, fields, config)
    local cfg = { cluster = cluster, hostname = "web1.example.com", services = { "base", "web" },
      nodes = { ["node-1"] = { hostname = "web1.example.com", nodenum = 1000 } } }
    for k, v in pairs(config or {}) do cfg[k] = v end
    return loom.test.run(name, { ipaddress = HOST, sshauth = auth(), fields = fields, config = cfg, service = "web" })
  end

  it("runs chef-solo as root with -c, -j and the override run list", function()
    local res = action("INSTALL", { run_list = " recipe[hello::default], role[web] " })
    assert.equals(0, res.status, res.message)
    assert.matches("Chef Client finished", res.stdout)
    local run = chef.runs[1]
    assert.equals("recipe[hello::default],role[web]", run.run_list)
    assert.equals("root", run.user)
    assert.same({ "chef-solo", "--no-color", "-c", "/var/chef/loom-solo.rb", "-j", run.json, "-o",
      "recipe[hello::default],role[web]" }, run.argv)
  end)

  it("gives chef-solo Coopr's attributes: the cluster config, the service's JSON over it, nodes and coopr", function()
    local res = action("CONFIGURE", { run_list = "recipe[hello]",
      json_attributes = json.encode({ hadoop = { core = { replication = 1 }, dirs = { "/b", "/c" } }, hello = { greeting = "hi" } }) })
    assert.equals(0, res.status, res.message)
    local a = chef.runs[1].attrs
    assert.same({ fs = "hdfs://nn:8020", replication = 1 }, a.hadoop.core)
    assert.same({ "/a", "/b", "/c" }, a.hadoop.dirs)
    assert.equals("hi", a.hello.greeting)
    assert.equals(1000, a.nodes["node-1"].nodenum)
    assert.same(a.hadoop, a.coopr.cluster.hadoop)
    assert.same(a.nodes, a.coopr.cluster.nodes)
    assert.same({ "base", "web" }, a.coopr.services)
    assert.equals("web1.example.com", a.coopr.hostname)
    assert.equals("cluster-1", a.coopr.clusterId)
    assert.equals(HOST, a.coopr.ipaddresses.access_v4)
  end)

  it("keeps the attributes (which carry the cluster's secrets) out of the logs and the command line", function()
    local res, logs = action("START", { run_list = "recipe[hello]" })
    assert.equals(0, res.status, res.message)
    assert.falsy(table.concat(logs, "\n"):find("cluster-Secret-value", 1, true))
    for _, c in ipairs(node:commands()) do
      assert.falsy(c.command:find("cluster-Secret-value", 1, true))
    end
    assert.truthy(chef.runs[1].stdin:find("cluster-Secret-value", 1, true))
  end)

  it("fails with chef's FATAL lines and its whole output", function()
    chef.fail_with = "Recipe: hello::default\n" ..
      "[2024-01-01T00:00:00+00:00] FATAL: Chef::Exceptions::CookbookNotFound: Cookbook nope not found.\n"
    local res = action("INSTALL", { run_list = "recipe[nope]" })
    assert.equals(1, res.status)
    assert.matches("chef%-solo exited with status 1: %[.-%] FATAL: Chef::Exceptions::CookbookNotFound: Cookbook nope not found%.", res.message)
    assert.matches("Recipe: hello::default", res.stdout)
  end)

  it("refuses a run list chef-solo would not read, before connecting", function()
    local before = #node:commands()
    local res = action("INSTALL", { run_list = "recipe[hello]; rm -rf /" })
    assert.equals(1, res.status)
    assert.matches('run_list item "recipe%[hello%];rm%-rf/"', res.message)
    assert.equals(before, #node:commands())
  end)

  it("refuses json_attributes that are not a JSON object", function()
    local res = action("INSTALL", { run_list = "recipe[hello]", json_attributes = "[1, 2]" })
    assert.equals(1, res.status)
    assert.matches("json_attributes must be a JSON object", res.message)
  end)

  it("ships first when its chef_dir has nothing yet, then runs", function()
    local res = action("INSTALL", { run_list = "recipe[hello]", chef_dir = "/opt/app/chef" })
    assert.equals(0, res.status, res.message)
    assert.equals(1, #chef.runs)
    assert.equals("/opt/app/chef/loom-solo.rb", chef.runs[1].config)
    assert.truthy(node:file("/opt/app/chef/loom-solo.rb"))
    assert.truthy(node:file("/opt/app/chef/cookbooks/hello/metadata.rb"))
  end)
end)

describe("Coopr's attribute merge (deep_merge gem 1.x)", function()
  local merge = attributes.deep_merge

  it("merges hashes key by key; the service's scalars win", function()
    assert.same({ a = { b = 2, c = 3 }, d = 4 }, merge({ a = { b = 2 } }, { a = { b = 1, c = 3 }, d = 4 }))
  end)

  it("unites arrays: the cluster's first, repeats removed", function()
    assert.same({ 1, 2, 3 }, merge({ 2, 3, 3 }, { 1, 2, 1 }))
  end)

  it("de-duplicates the arrays of a value the cluster lacks", function()
    assert.same({ x = { l = { 1, 2 } } }, merge({ x = { l = { 1, 1, 2 } } }, {}))
  end)

  it("replaces a false destination, keeps a destination against nothing", function()
    assert.same({ a = true }, merge({ a = true }, { a = false }))
    assert.same({ a = 1 }, merge({}, { a = 1 }))
  end)

  it("lets a hash replace a scalar, but not an empty one", function()
    assert.same({ a = { b = 1 } }, merge({ a = { b = 1 } }, { a = "x" }))
    assert.same({ a = "x" }, merge({ a = json.decode("{}") }, { a = "x" }))
  end)

  it("lets an array or a scalar replace a hash", function()
    assert.same({ a = { 1 } }, merge({ a = { 1 } }, { a = { b = 1 } }))
    assert.same({ a = 0 }, merge({ a = 0 }, { a = { b = 1 } }))
  end)

  it("gives up Coopr's coopr block when the merged data has its own coopr key, as Coopr did", function()
    local task = { clusterId = "c1", config = { cluster = { coopr = { mine = true } }, hostname = "h" } }
    local a = attributes.build(task, "")
    assert.same({ mine = true }, a.coopr)
    local b = attributes.build({ clusterId = "c1", config = { cluster = {}, hostname = "h" } }, "")
    assert.equals("h", b.coopr.hostname)
    assert.same({}, b.nodes)
    assert.same({}, b.coopr.services)
  end)
end)

describe("a node's life", function()
  before_each(function()
    write_resources()
    new_node({ installed = false })
  end)

  it("BOOTSTRAP through REMOVE: Chef installed once, resources shipped once, six runs", function()
    local c = loom.test.chain({ fields = { run_list = "recipe[hello]" },
      config = { ipaddresses = { access_v4 = HOST }, ["ssh-auth"] = auth(), service = { name = "web" } } })
    assert.truthy(c.ok, c.failed)
    assert.equals(1, chef.installs)
    assert.equals(1, tar_uploads())
    assert.equals(6, #chef.runs)
    assert.same({}, c.leftovers)
  end)
end)
