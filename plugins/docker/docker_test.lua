-- Tests for the docker automator, run by `loomd test plugins/docker` (and
-- by `make test`), against an SSH fake node whose `docker` is simulated
-- here from the commands' words: containers by name with their labels,
-- images, and the errors docker prints. The Go tests (podman_test.go) run
-- the same hooks against real podman on real sshd hosts.

local json = require("loom.json")

local HOST = "10.0.0.5"
local SECRET = "db-Passw0rd-not-for-logs"

local node, docker

-- words splits a command line the binding's ssh.quote built: plain words
-- and '...' words with '\'' for a quote.
local function words(cmd)
  local out, i, n = {}, 1, #cmd
  while i <= n do
    local c = cmd:sub(i, i)
    if c:match("%s") then
      i = i + 1
    else
      local w = ""
      while i <= n and not cmd:sub(i, i):match("%s") do
        c = cmd:sub(i, i)
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

-- new_docker is the simulated docker CLI: state and a handler for every
-- command that starts with "docker" (or the run line's eval prefix).
local function new_docker()
  local d = { containers = {}, images = { ["nginx:1.25"] = true }, runs = {}, pulls = {}, next = 1,
    pull_errors = {} }
  function d.handle(cmd)
    local line = cmd.command:gsub('^eval "%$%(cat%)"; exec ', "")
    local a = words(line)
    if a[1] ~= "docker" then return { exit_code = 127, stderr = "not docker: " .. line } end
    local verb = a[2]
    if verb == "container" and a[3] == "inspect" then
      local c = d.containers[a[6]]
      if not c then return { exit_code = 1, stderr = "Error: No such container: " .. a[6] .. "\n" } end
      return { stdout = ("%s|%s|%s\n"):format(c.id, tostring(c.running), c.labels["loom.config"] or "<no value>") }
    elseif verb == "image" and a[3] == "inspect" then
      if d.images[a[4]] then return { stdout = "[]\n" } end
      return { exit_code = 1, stderr = "Error: No such image: " .. a[4] .. "\n" }
    elseif verb == "pull" then
      d.pulls[#d.pulls + 1] = a[3]
      -- A slow registry: the pull takes this long on the virtual clock.
      if d.pull_takes then loom.test.clock.advance(d.pull_takes) end
      local e = table.remove(d.pull_errors, 1)
      if e then return { exit_code = 1, stderr = e } end
      if a[3]:match("^missing") then
        return { exit_code = 1, stderr = "Error response from daemon: manifest for " .. a[3] .. " not found: manifest unknown\n" }
      end
      d.images[a[3]] = true
      return { stdout = "Status: Downloaded newer image for " .. a[3] .. "\n" }
    elseif verb == "run" then
      local c = { labels = {}, env = {}, ports = {}, running = true, id = ("%064x"):format(d.next) }
      d.next = d.next + 1
      local i = 3
      while i <= #a do
        local f = a[i]
        if f == "-d" then
          i = i + 1
        elseif f == "--name" then c.name = a[i + 1]; i = i + 2
        elseif f == "--label" then
          local k, v = a[i + 1]:match("^([^=]+)=(.*)$")
          c.labels[k] = v
          i = i + 2
        elseif f == "-e" then
          -- -e NAME takes the value from the CLI's environment: here, the
          -- export lines the plugin sent on stdin.
          local v = cmd.stdin:match("export " .. a[i + 1] .. "=([^\n]*)")
          c.env[a[i + 1]] = v and words(v)[1] or nil
          i = i + 2
        elseif f == "-p" then c.ports[#c.ports + 1] = a[i + 1]; i = i + 2
        elseif f == "-v" or f == "--link" or f == "--network" or f == "--restart" then i = i + 2
        else
          c.image = f
          c.command = {}
          for j = i + 1, #a do c.command[#c.command + 1] = a[j] end
          break
        end
      end
      if d.containers[c.name] then
        return { exit_code = 125, stderr = "docker: Error response from daemon: Conflict. The container name \"/" .. c.name .. "\" is already in use.\n" }
      end
      d.containers[c.name] = c
      d.runs[#d.runs + 1] = c
      return { stdout = c.id .. "\n" }
    elseif verb == "start" or verb == "stop" then
      local c = d.containers[a[#a]]
      if not c then return { exit_code = 1, stderr = "Error: No such container: " .. a[#a] .. "\n" } end
      c.running = verb == "start"
      return { stdout = a[#a] .. "\n" }
    elseif verb == "rm" then
      local c = d.containers[a[#a]]
      if not c then return { exit_code = 1, stderr = "Error: No such container: " .. a[#a] .. "\n" } end
      d.containers[a[#a]] = nil
      return { stdout = a[#a] .. "\n" }
    elseif verb == "--version" then
      return { stdout = "Docker version 24.0.7, build afdd53b\n" }
    elseif verb == "version" then
      return { stdout = "24.0.7\n" }
    end
    return { exit_code = 1, stderr = "unknown docker command: " .. line }
  end
  return d
end

local function new_node(opts)
  opts = opts or {}
  docker = new_docker()
  if node then node:close() end
  node = loom.test.ssh({ host = HOST, user = opts.user, password = opts.password })
  node:on("command -v docker; command -v podman; true", { stdout = "/usr/bin/docker\n" })
  node:on("^eval \"%$%(cat%)\"; exec docker ", docker.handle)
  node:on("^docker ", docker.handle)
  node:on("^for d in ", 0)
  return node
end

local function run(name, fields, extra)
  extra = extra or {}
  local f = { image_name = "nginx:1.25", publish_ports = "8080:80", environment_variables = "MODE=prod,DB_PASSWORD=" .. SECRET }
  for k, v in pairs(fields or {}) do f[k] = v end
  local opts = { ipaddress = HOST, sshauth = extra.sshauth or { user = "root", password = "pw" }, fields = f,
    service = extra.service or "web" }
  if extra.config then opts.config = extra.config end
  return loom.test.run(name, opts)
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

describe("BOOTSTRAP", function()
  before_each(function() new_node() end)

  it("finds docker and reports its version", function()
    local res = loom.test.run("BOOTSTRAP", { ipaddress = HOST, sshauth = { user = "root", password = "pw" } })
    assert.equals(0, res.status, res.message)
    assert.matches("Docker version 24", res.stdout)
  end)

  it("uses podman when docker's daemon does not answer", function()
    node:on("command -v docker; command -v podman; true", { stdout = "/usr/bin/docker\n/usr/bin/podman\n" })
    node:on("docker version --format '{{.Server.Version}}'", { exit_code = 1,
      stderr = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n" })
    node:on("podman --version", { stdout = "podman version 4.3.1\n" })
    local res = loom.test.run("BOOTSTRAP", { ipaddress = HOST, sshauth = { user = "root", password = "pw" } })
    assert.equals(0, res.status, res.message)
    assert.matches("podman version 4.3.1", res.stdout)
  end)

  it("fails, saying what to install, on a node with neither", function()
    node:on("command -v docker; command -v podman; true", { stdout = "" })
    local res = loom.test.run("BOOTSTRAP", { ipaddress = HOST, sshauth = { user = "root", password = "pw" } })
    assert.equals(1, res.status)
    assert.matches("neither docker nor podman", res.message)
  end)

  it("fails with SSH's reason when the credentials are refused", function()
    new_node({ user = "root", password = "right" })
    local res = loom.test.run("BOOTSTRAP", { ipaddress = HOST, sshauth = { user = "root", password = "wrong-" .. SECRET } })
    assert.equals(1, res.status)
    assert.matches("connecting on root@10%.0%.0%.5:22", res.message)
    assert.matches("ssh%-auth", res.message)
    assert.falsy(json.encode(res):find(SECRET, 1, true))
  end)
end)

describe("INSTALL", function()
  before_each(function() new_node() end)

  it("pulls a tagged image only when it is missing", function()
    local res = run("INSTALL", { image_name = "redis:7" })
    assert.equals(0, res.status, res.message)
    assert.same({ "redis:7" }, docker.pulls)
    res = run("INSTALL", { image_name = "redis:7" })
    assert.equals(0, res.status, res.message)
    assert.same({ "redis:7" }, docker.pulls)
  end)

  it("pulls :latest every time, as docker run would not", function()
    docker.images["redis:latest"] = true
    assert.equals(0, run("INSTALL", { image_name = "redis:latest" }).status)
    assert.same({ "redis:latest" }, docker.pulls)
  end)

  it("makes the volumes' missing host dirs for the SSH user", function()
    local res = run("INSTALL", { volumes = "/srv/web:/usr/share/nginx/html:ro,/srv/logs:/var/log/nginx" }, { sshauth = { user = "deploy", password = "pw" } })
    assert.equals(0, res.status, res.message)
    local c = node:last("^for d in ")
    assert.matches("chown deploy", c.command)
    assert.matches("/srv/web /srv/logs", c.command)
    assert.equals("root", c.user)
  end)

  it("waits out a registry's pull rate limit on the virtual clock", function()
    docker.pull_errors = { "Error response from daemon: toomanyrequests: You have reached your pull rate limit.\n" }
    local res = run("INSTALL", { image_name = "redis:7" })
    assert.equals(0, res.status, res.message)
    assert.same({ "redis:7", "redis:7" }, docker.pulls)
    assert.same({ 10 }, loom.test.clock.sleeps())
  end)

  it("gives up on the rate limit before the hook deadline, saying so", function()
    local limited = "Error response from daemon: toomanyrequests: You have reached your pull rate limit.\n"
    docker.pull_errors = { limited, limited, limited, limited }
    -- INSTALL's deadline is 30m (docker.json), on the virtual clock; each
    -- rate-limited pull takes 14m50s, so after the second only 10s are
    -- left, too few for the next 30s wait.
    docker.pull_takes = 890
    local res = run("INSTALL", { image_name = "redis:7" })
    assert.equals(1, res.status)
    assert.matches("rate%-limits pulls and the hook deadline leaves no time to wait 30s more", res.message)
    assert.same({ 10 }, loom.test.clock.sleeps())
  end)

  it("fails with the registry's message for an image that does not exist", function()
    local res = run("INSTALL", { image_name = "missing/app:1" })
    assert.equals(1, res.status)
    assert.matches("manifest unknown", res.message)
  end)
end)

describe("START", function()
  before_each(function() new_node() end)

  it("runs the service's container with its ports, labels and environment", function()
    local res = run("START", { command = "nginx -g 'daemon off;'" })
    assert.equals(0, res.status, res.message)
    local c = docker.containers["coopr-web"]
    assert.truthy(c, "no container coopr-web")
    assert.same({ "8080:80" }, c.ports)
    assert.same({ MODE = "prod", DB_PASSWORD = SECRET }, c.env)
    assert.same({ "nginx", "-g", "daemon off;" }, c.command)
    assert.equals("web", c.labels["loom.service"])
    assert.equals(c.id, res.result["nginx:1.25"].id)
    assert.same({ "8080" }, res.result.ports)
    assert.same({ name = "coopr-web", id = c.id, image = "nginx:1.25", ports = { "8080" }, running = true }, res.result.docker.web)
  end)

  it("never puts environment values on a command line or in the logs", function()
    local res, logs = run("START")
    assert.equals(0, res.status, res.message)
    for _, cmd in ipairs(node:commands()) do
      assert.falsy(cmd.command:find(SECRET, 1, true), "a command line holds the secret: " .. cmd.command)
    end
    assert.truthy(node:last("^eval").stdin:find(SECRET, 1, true))
    assert.falsy(table.concat(logs, "\n"):find(SECRET, 1, true))
  end)

  it("run again after a lost answer, leaves the running container alone", function()
    assert.equals(0, run("START").status)
    local again = run("START")
    assert.equals(0, again.status, again.message)
    assert.equals(1, #docker.runs)
    assert.equals(docker.runs[1].id, again.result["nginx:1.25"].id)
  end)

  it("starts a stopped container again", function()
    assert.equals(0, run("START").status)
    docker.containers["coopr-web"].running = false
    assert.equals(0, run("START").status)
    assert.equals(1, #docker.runs)
    assert.truthy(docker.containers["coopr-web"].running)
  end)

  it("replaces a container whose settings changed", function()
    assert.equals(0, run("START").status)
    local res = run("START", { environment_variables = "MODE=staging" })
    assert.equals(0, res.status, res.message)
    assert.equals(2, #docker.runs)
    assert.same({ MODE = "staging" }, docker.containers["coopr-web"].env)
    node:assert_ran("^docker rm %-f coopr%-web$", 1)
  end)

  it("refuses a host port another service's container publishes on the node", function()
    local res = run("START", {}, { service = "api", config = { docker = {
      web = { name = "coopr-web", id = "abc", image = "nginx:1.25", ports = { "8080" }, running = true } } } })
    assert.equals(1, res.status)
    assert.matches("host port 8080 is already published by service web", res.message)
    assert.equals(0, #docker.runs)
  end)

  it("refuses a malformed port before touching the node", function()
    local res = run("START", { publish_ports = "80:http" })
    assert.equals(1, res.status)
    assert.matches('publish_ports entry "80:http"', res.message)
    assert.equals(0, #node:commands())
  end)
end)

describe("STOP and REMOVE", function()
  before_each(function() new_node() end)

  it("stop, then remove, and both again succeed", function()
    local started = run("START")
    assert.equals(0, started.status)
    local cfg = { docker = started.result.docker }
    local stop = run("STOP", { stop_timeout = "3" }, { config = cfg })
    assert.equals(0, stop.status, stop.message)
    assert.falsy(docker.containers["coopr-web"].running)
    node:assert_ran("^docker stop %-t 3 coopr%-web$", 1)
    assert.equals(false, stop.result.docker.web.running)
    assert.same({}, stop.result.ports)
    local rm = run("REMOVE", {}, { config = { docker = stop.result.docker } })
    assert.equals(0, rm.status, rm.message)
    assert.is_nil(docker.containers["coopr-web"])
    assert.is_nil(rm.result.docker.web)
    assert.equals(0, run("STOP").status)
    assert.equals(0, run("REMOVE").status)
  end)

  it("stops the container Coopr's automator started, by its recorded id", function()
    local id = ("%064x"):format(777)
    docker.containers[id] = { id = id, name = "coopr-nginx", running = true, labels = {}, env = {}, ports = {} }
    local res = run("STOP", {}, { config = { ["nginx:1.25"] = { id = id } } })
    assert.equals(0, res.status, res.message)
    assert.falsy(docker.containers[id].running)
  end)
end)

describe("a node's life", function()
  before_each(function() new_node() end)

  it("BOOTSTRAP through REMOVE leaves no container", function()
    local c = loom.test.chain({ fields = { image_name = "nginx:1.25", publish_ports = "8080:80" },
      config = { ipaddresses = { access_v4 = HOST }, ["ssh-auth"] = { user = "root", password = "pw" }, service = { name = "web" } } })
    assert.truthy(c.ok, c.failed)
    assert.equals(0, count(docker.containers))
    assert.equals(1, #docker.runs)
  end)
end)
