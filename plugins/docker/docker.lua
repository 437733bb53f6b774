-- The docker automator: the Loom port of Coopr's DockerAutomator. Each
-- service on a node is one container, run with the node's docker or
-- podman CLI over one pooled, host-key-checked SSH connection.
--
--   bootstrap  checks that the node has a container CLI (docker or podman)
--   install    makes the host dirs of the volumes, pulls the image
--   configure, init   nothing (as in Coopr)
--   start      runs the service's container, or starts it again, or
--              replaces it when its settings changed
--   stop       stops it
--   remove     removes it
--
-- What Loom does differently from Coopr, and why:
--   * the container is named after the service (coopr-<service>), not
--     after the image's last path segment: two services may use one image,
--     and Coopr's names broke on a tag ("coopr-nginx:1.25" is not a valid
--     name);
--   * START is idempotent: a running container with the same settings is
--     left alone, a stopped one is started, one with other settings is
--     replaced (the settings' digest is the label loom.config);
--   * values are quoted, never pasted into a shell line; environment
--     values travel on stdin, not on the command line where ps shows them;
--   * `docker search` (Docker Hub only, and gone from podman's meaning) is
--     not run: a missing image fails the pull with the registry's message;
--   * STOP and REMOVE of a container that does not exist succeed (a REMOVE
--     run again, a node wiped by hand).
-- Results keep Coopr's keys (result[<image_name>].id, result.ports) and
-- add result.docker[<service>] = {name, id, image, ports, running}.

local loom = require("loom")
local json = require("loom.json")
local ssh = require("loom.ssh")
local crypto = require("loom.crypto")
local time = require("loom.time")

DockerAutomator = loom.Automator:extend("DockerAutomator")

local HINTS = {
  host_key = "the node's host key is not the one recorded for it: if the node was legitimately reinstalled, run CONFIRM again"
    .. " so the provider records its new keys (config.ssh_host_keys), or add them to loomd --known-hosts",
  auth = "check config[\"ssh-auth\"] (user, password or identityfile) and that this user may log in (and run sudo when sudo is set)",
  connect = "check that the node is up, the address is right and sshd listens on that port",
  timeout = "the node or the container CLI was too slow (a large pull?): raise the docker type's timeouts in its definition",
  transport_lost = "the SSH connection dropped mid-step; the task can be run again",
}

------------------------------------------------------------------------
-- Helpers
------------------------------------------------------------------------

local function trim(s) return (tostring(s or ""):match("^%s*(.-)%s*$")) end

local function truthy(v, default)
  if v == nil or v == "" then return default end
  if type(v) == "boolean" then return v end
  local s = tostring(v):lower()
  return s == "true" or s == "1" or s == "yes" or s == "on"
end

-- list reads a list field: Coopr's comma-separated string, a JSON array in
-- a string, or a list (loomd specs may give one).
local function list(v, what)
  if v == nil or v == "" then return {} end
  if type(v) == "table" then
    local out = {}
    for _, x in ipairs(v) do out[#out + 1] = tostring(x) end
    return out
  end
  local s = trim(v)
  if s:sub(1, 1) == "[" then
    local ok, doc = pcall(json.decode, s)
    if not ok or type(doc) ~= "table" then
      error({ kind = "config", message = ("%s looks like a JSON array but is not one: %s"):format(what, s) }, 0)
    end
    return list(doc, what)
  end
  local out = {}
  for item in s:gmatch("[^,]+") do
    item = trim(item)
    if item ~= "" then out[#out + 1] = item end
  end
  return out
end

-- split_words splits the command field the way a shell splits words
-- (quotes, backslashes), without any expansion.
local function split_words(s)
  local words, cur, quote = {}, nil, nil
  local i, n = 1, #s
  local function add(c) cur = (cur or "") .. c end
  while i <= n do
    local c = s:sub(i, i)
    if quote == "'" then
      if c == "'" then quote = nil else add(c) end
    elseif quote == '"' then
      local nxt = s:sub(i + 1, i + 1)
      if c == '"' then
        quote = nil
      elseif c == "\\" and nxt:match('[\\"$`]') then
        add(nxt)
        i = i + 1
      else
        add(c)
      end
    elseif c == "'" or c == '"' then
      quote = c
      cur = cur or ""
    elseif c == "\\" and i < n then
      add(s:sub(i + 1, i + 1))
      i = i + 1
    elseif c:match("%s") then
      if cur ~= nil then
        words[#words + 1] = cur
        cur = nil
      end
    else
      add(c)
    end
    i = i + 1
  end
  if quote ~= nil then
    error({ kind = "config", message = ("command has an unbalanced %s quote: %s"):format(quote, s) }, 0)
  end
  if cur ~= nil then words[#words + 1] = cur end
  return words
end

-- A container name docker and podman accept: [a-zA-Z0-9][a-zA-Z0-9_.-]*.
local function container_name(s)
  local n = tostring(s):gsub("[^%w_%.%-]", "-"):gsub("^[^%w]+", "")
  if n == "" then n = "x" end
  return n
end

-- ports parses publish_ports: "8080:80", "80" (the same port on the
-- host, as Coopr did), "127.0.0.1:8080:80" or "127.0.0.1::80", with an
-- optional "/udp" or "/tcp". Returns the -p values and the host ports
-- they take ("8080", "53/udp").
local function ports(spec)
  local args, host_ports = {}, {}
  for _, p in ipairs(spec) do
    local body, proto = p:match("^(.-)/(%a+)$")
    if not body then body = p end
    local parts = {}
    for x in (body .. ":"):gmatch("([^:]*):") do parts[#parts + 1] = x end
    local ip, host, cont
    if #parts == 1 then
      host, cont = parts[1], parts[1]
    elseif #parts == 2 then
      host, cont = parts[1], parts[2]
    elseif #parts == 3 then
      ip, host, cont = parts[1], parts[2], parts[3]
    end
    local ok = cont ~= nil and cont:match("^%d+$") and (host:match("^%d+$") or (ip ~= nil and host == ""))
      and (proto == nil or proto == "tcp" or proto == "udp" or proto == "sctp")
    if not ok then
      error({ kind = "config", message = ("publish_ports entry %q is not [ip:]host:container or container (port numbers, optionally /udp)"):format(p) }, 0)
    end
    local suffix = proto and ("/" .. proto) or ""
    args[#args + 1] = (ip and (ip .. ":") or "") .. host .. ":" .. cont .. suffix
    if host ~= "" then host_ports[#host_ports + 1] = host .. ((proto and proto ~= "tcp") and suffix or "") end
  end
  return args, host_ports
end

local function env_pairs(spec)
  local out = {}
  for _, e in ipairs(spec) do
    local k, v = e:match("^([^=]+)=(.*)$")
    if not k then k, v = e, nil end
    k = trim(k)
    if not k:match("^[%a_][%w_]*$") then
      error({ kind = "config", message = ("environment_variables entry %q is not NAME=value"):format(e) }, 0)
    end
    out[#out + 1] = { k, v }
  end
  return out
end

-- copy copies a decoded JSON table one level deep (config.docker).
local function copy(t)
  local out = {}
  for k, v in pairs(type(t) == "table" and t or {}) do out[k] = v end
  return out
end

------------------------------------------------------------------------
-- SSH
------------------------------------------------------------------------

function DockerAutomator:where(input)
  local auth = input.sshauth or {}
  local user = auth.user or self.task.config.sshuser or "root"
  return ("%s@%s:%d (task %s, %s)"):format(user, tostring(input.ipaddress), tonumber(auth.port) or 22,
    tostring(self.task.taskId), tostring(self.task.taskName))
end

-- fail raises a structured error saying what failed, where and what to
-- do; a binding error keeps its kind and fields.
function DockerAutomator:fail(input, what, err)
  local e = {}
  if type(err) == "table" then
    for k, v in pairs(err) do e[k] = v end
  else
    e.kind, e.message = "docker", tostring(err)
  end
  local msg = ("docker: %s on %s failed: %s"):format(what, self:where(input), tostring(e.message))
  if HINTS[e.kind] then msg = msg .. " (" .. HINTS[e.kind] .. ")" end
  e.message = msg
  self.result.status = 1
  error(e, 0)
end

function DockerAutomator:connection(input)
  if self._conn == nil then
    local opts = {}
    local auth = input.sshauth or {}
    if auth.port ~= nil then opts.port = tonumber(auth.port) end
    local ok, conn = pcall(ssh.from_input, input, self.task, opts)
    if not ok then self:fail(input, "connecting", conn) end
    self._conn = conn
  end
  return self._conn
end

-- sudo: none for root, sudo with the SSH password when there is one,
-- else sudo -n (NOPASSWD).
function DockerAutomator:sudo(input)
  local auth = input.sshauth or {}
  local user = auth.user or self.task.config.sshuser or "root"
  if user == "root" then return nil end
  if type(auth.password) == "string" and auth.password ~= "" then return { password = auth.password } end
  return true
end

-- exec runs cmd on the node and returns the binding's result; a failure to
-- run at all (connection, timeout) fails the task.
function DockerAutomator:exec(input, what, cmd, opts)
  local conn = self:connection(input)
  local ok, r = pcall(conn.exec, conn, cmd, opts or {})
  if not ok then self:fail(input, what, r) end
  return r
end

-- failed fails the task with a command's output.
function DockerAutomator:failed(input, what, r)
  self.result.stdout, self.result.stderr = r.stdout, r.stderr
  local detail = trim(r.stderr ~= "" and r.stderr or r.stdout)
  self:fail(input, what, { kind = "command", exit_code = r.exit_code, stdout = r.stdout, stderr = r.stderr,
    message = ("exit status %s: %s"):format(tostring(r.exit_code), detail ~= "" and detail:sub(1, 2000) or "no output") })
end

-- must runs cmd and fails the task with its output when it exits non-zero.
function DockerAutomator:must(input, what, cmd, opts)
  local r = self:exec(input, what, cmd, opts)
  if not r.ok then self:failed(input, what, r) end
  return r
end

-- Waits before pulling again when the registry rate-limits pulls (Docker
-- Hub's "toomanyrequests"), within the hook deadline.
local PULL_WAITS = { 10, 30, 60 }

-- pull pulls image, waiting out a registry's rate limit.
function DockerAutomator:pull(input, cli, opts, image)
  local what = "pulling " .. image
  for attempt = 1, #PULL_WAITS + 1 do
    local r = self:exec(input, what, ssh.quote(cli, "pull", image), opts)
    if r.ok then return end
    local out = r.stderr .. r.stdout
    local limited = out:find("toomanyrequests", 1, true) or out:find("429 Too Many Requests", 1, true)
    local wait = PULL_WAITS[attempt]
    if not limited or wait == nil then self:failed(input, what, r) end
    local left = time.remaining()
    if left ~= nil and left - 10 < wait then
      self:fail(input, what, { kind = "timeout", stderr = r.stderr,
        message = ("the registry rate-limits pulls and the hook deadline leaves no time to wait %ds more: %s"):format(wait, trim(r.stderr)) })
    end
    log.warn("%s: the registry rate-limits pulls; trying again in %ds", what, wait)
    time.sleep(wait)
  end
end

-- cli finds the container CLI: fields.cli, or (auto) docker when its
-- daemon answers, else podman, which needs no daemon. It returns the
-- command and the options every call of it gets (sudo).
function DockerAutomator:cli(input, fields)
  local want = trim(fields and fields.cli or "auto")
  if want == "" then want = "auto" end
  local opts = {}
  if truthy(fields and fields.sudo, false) then opts.sudo = self:sudo(input) end
  if want == "docker" or want == "podman" then return want, opts end
  if want ~= "auto" then
    self:fail(input, "choosing the container CLI", { kind = "config", message = ("cli %q must be auto, docker or podman"):format(want) })
  end
  local r = self:exec(input, "looking for docker or podman", "command -v docker; command -v podman; true", opts)
  local has_docker = r.stdout:find("docker", 1, true) ~= nil
  local has_podman = r.stdout:find("podman", 1, true) ~= nil
  if has_docker then
    local v = self:exec(input, "asking docker for its version", "docker version --format '{{.Server.Version}}'", opts)
    if v.ok then return "docker", opts end
    if not has_podman then
      self:fail(input, "asking docker for its version", { kind = "docker", message = "docker is installed but its daemon does not answer: "
        .. trim(v.stderr) .. " (start dockerd, let the SSH user use its socket, or set the field sudo)" })
    end
    log.info("docker's daemon does not answer on %s (%s): using podman", tostring(input.ipaddress), trim(v.stderr))
  end
  if has_podman then return "podman", opts end
  self:fail(input, "looking for docker or podman", { kind = "docker",
    message = "neither docker nor podman is on the node's PATH: install one (apt-get install docker.io, or podman)" })
end

------------------------------------------------------------------------
-- The desired container
------------------------------------------------------------------------

-- spec reads the service's fields into the container it wants.
function DockerAutomator:spec(input)
  local f = input.fields or {}
  local ok, res = pcall(function()
    local image = tostring(f.image_name or ""):gsub("%s+", "")
    if image == "" then error({ kind = "config", message = "image_name is empty" }, 0) end
    local service = self.task.config.service and self.task.config.service.name or nil
    local name = trim(f.container_name or "")
    if name == "" then
      if service == nil then error({ kind = "config", message = "no service in the task to name the container after; set container_name" }, 0) end
      name = "coopr-" .. service
    end
    local s = {
      image = image,
      name = container_name(name),
      service = service or name,
      command = split_words(tostring(f.command or "")),
      env = env_pairs(list(f.environment_variables, "environment_variables")),
      links = list(f.links, "links"),
      volumes = list(f.volumes, "volumes"),
      network = trim(f.network or ""),
      restart = trim(f.restart or ""),
    }
    s.ports, s.host_ports = ports(list(f.publish_ports, "publish_ports"))
    return s
  end)
  if not ok then self:fail(input, "reading the service's fields", res) end
  return res
end

-- digest names the container's settings: a change in any of them makes
-- START replace the container.
local function digest(s)
  local env = {}
  for _, kv in ipairs(s.env) do env[#env + 1] = kv[1] .. "=" .. tostring(kv[2]) end
  return crypto.sha256(json.encode({ s.image, s.command, env, s.links, s.volumes, s.ports, s.network, s.restart }))
end

-- run_command is the `run` command line (environment values come on
-- stdin, see env_stdin).
local function run_command(cli, s, d, task)
  local q = ssh.quote
  local args = { cli, "run", "-d", "--name", s.name,
    "--label", "loom.config=" .. d, "--label", "loom.service=" .. s.service,
    "--label", "loom.node=" .. tostring(task.nodeId or ""), "--label", "loom.cluster=" .. tostring(task.clusterId or "") }
  for _, p in ipairs(s.ports) do args[#args + 1] = "-p"; args[#args + 1] = p end
  for _, kv in ipairs(s.env) do args[#args + 1] = "-e"; args[#args + 1] = kv[1] end
  for _, v in ipairs(s.volumes) do args[#args + 1] = "-v"; args[#args + 1] = v end
  for _, l in ipairs(s.links) do args[#args + 1] = "--link"; args[#args + 1] = l end
  if s.network ~= "" then args[#args + 1] = "--network"; args[#args + 1] = s.network end
  if s.restart ~= "" then args[#args + 1] = "--restart"; args[#args + 1] = s.restart end
  args[#args + 1] = s.image
  for _, w in ipairs(s.command) do args[#args + 1] = w end
  local quoted = {}
  for i, a in ipairs(args) do quoted[i] = q(a) end
  -- The values are read from stdin into the environment of the CLI, which
  -- passes -e NAME on from it: they never appear on a command line.
  return 'eval "$(cat)"; exec ' .. table.concat(quoted, " ")
end

local function env_stdin(s)
  local lines = {}
  for _, kv in ipairs(s.env) do
    if kv[2] ~= nil then lines[#lines + 1] = "export " .. kv[1] .. "=" .. ssh.quote(kv[2]) end
  end
  return table.concat(lines, "\n") .. "\n"
end

-- inspect returns {id, running, config} of the container named name, or
-- nil when there is none.
function DockerAutomator:inspect(input, cli, opts, name)
  local r = self:exec(input, "inspecting container " .. name,
    ssh.quote(cli, "container", "inspect", "--format", '{{.Id}}|{{.State.Running}}|{{index .Config.Labels "loom.config"}}', name), opts)
  if not r.ok then
    if (r.stderr .. r.stdout):lower():find("no such") then return nil end
    self:fail(input, "inspecting container " .. name, { kind = "command", stdout = r.stdout, stderr = r.stderr,
      exit_code = r.exit_code, message = trim(r.stderr) })
  end
  local id, running, cfg = trim(r.stdout):match("^([^|]*)|([^|]*)|(.*)$")
  if not id then
    self:fail(input, "inspecting container " .. name, { kind = "docker", message = "unexpected answer: " .. r.stdout })
  end
  return { id = id, running = running == "true", config = cfg }
end

-- record writes the node's docker results: Coopr's result[<image>].id and
-- result.ports, and result.docker[<service>].
function DockerAutomator:record(s, entry)
  local all = copy(self.task.config.docker)
  all[s.service] = entry
  self.result.result.docker = all
  local used, seen = {}, {}
  for _, e in pairs(all) do
    if type(e) == "table" and e.running then
      for _, p in ipairs(e.ports or {}) do
        if not seen[p] then
          seen[p] = true
          used[#used + 1] = p
        end
      end
    end
  end
  table.sort(used)
  self.result.result.ports = json.array(used)
  if entry then
    self.result.result[s.image] = { id = entry.id }
  else
    self.result.result[s.image] = {}
  end
end

------------------------------------------------------------------------
-- Hooks
------------------------------------------------------------------------

function DockerAutomator:bootstrap(input)
  -- BOOTSTRAP gets no fields (Coopr passes none): the CLI is found.
  local cli, opts = self:cli(input, nil)
  local v = self:exec(input, "asking " .. cli .. " for its version", cli .. " --version", opts)
  log.info("%s on %s: %s", cli, tostring(input.ipaddress), trim(v.stdout))
  self.result.stdout = trim(v.stdout)
  self.result.status = 0
end

-- pull_needed applies the pull policy: always, missing, never, or auto
-- (always for :latest or no tag, else when missing; never re-pull a
-- digest).
local function pull_policy(policy, image)
  policy = trim(policy)
  if policy == "" or policy == "auto" then
    if image:find("@", 1, true) then return "missing" end
    local last = image:match("[^/]*$")
    local tag = last:match(":(.+)$")
    if tag == nil or tag == "latest" then return "always" end
    return "missing"
  end
  if policy ~= "always" and policy ~= "missing" and policy ~= "never" then
    error({ kind = "config", message = ("pull %q must be auto, always, missing or never"):format(policy) }, 0)
  end
  return policy
end

function DockerAutomator:install(input)
  local s = self:spec(input)
  local cli, opts = self:cli(input, input.fields)
  -- The host side of bind mounts, made (and given to the SSH user) when
  -- missing, as Coopr did.
  local dirs = {}
  for _, v in ipairs(s.volumes) do
    local host = v:match("^([^:]+):")
    if host and host:sub(1, 1) == "/" then dirs[#dirs + 1] = host end
  end
  if #dirs > 0 then
    local auth = input.sshauth or {}
    local user = auth.user or self.task.config.sshuser or "root"
    local quoted = {}
    for i, d in ipairs(dirs) do quoted[i] = ssh.quote(d) end
    local cmd = "for d in " .. table.concat(quoted, " ") .. "; do [ -d \"$d\" ] || { mkdir -p \"$d\" && chown "
      .. ssh.quote(user) .. " \"$d\"; } || exit 1; done"
    self:must(input, "making the volumes' host dirs", cmd, { sudo = self:sudo(input) })
  end
  local ok, policy = pcall(pull_policy, input.fields.pull, s.image)
  if not ok then self:fail(input, "reading the pull field", policy) end
  local present = self:exec(input, "looking for image " .. s.image, ssh.quote(cli, "image", "inspect", s.image) .. " >/dev/null", opts).ok
  if policy == "always" or (policy == "missing" and not present) then
    log.info("pulling %s with %s on %s", s.image, cli, tostring(input.ipaddress))
    self:pull(input, cli, opts, s.image)
  elseif policy == "never" and not present then
    self:fail(input, "looking for image " .. s.image, { kind = "docker", message = ("the image is not on the node and pull is never: load it (%s load) or set pull"):format(cli) })
  else
    log.info("image %s is on %s already", s.image, tostring(input.ipaddress))
  end
  self.result.status = 0
end

-- Coopr's docker automator had nothing to do at CONFIGURE and INITIALIZE.
function DockerAutomator:configure()
  self.result.status = 0
end

function DockerAutomator:init()
  self.result.status = 0
end

function DockerAutomator:start(input)
  local s = self:spec(input)
  local cli, opts = self:cli(input, input.fields)
  -- A host port another service's container publishes on this node
  -- (Coopr's check, per container).
  for svc, e in pairs(copy(self.task.config.docker)) do
    if svc ~= s.service and type(e) == "table" and e.running then
      for _, p in ipairs(e.ports or {}) do
        for _, want in ipairs(s.host_ports) do
          if p == want then
            self:fail(input, "starting " .. s.name, { kind = "config",
              message = ("host port %s is already published by service %s's container %s on this node"):format(p, svc, tostring(e.name)) })
          end
        end
      end
    end
  end
  local d = digest(s)
  local have = self:inspect(input, cli, opts, s.name)
  if have and have.config ~= d then
    log.info("container %s has other settings than the service's: replacing it", s.name)
    self:must(input, "removing the old container " .. s.name, ssh.quote(cli, "rm", "-f", s.name), opts)
    have = nil
  end
  local id
  if have == nil then
    log.info("running %s as container %s on %s", s.image, s.name, tostring(input.ipaddress))
    local ropts = {}
    for k, v in pairs(opts) do ropts[k] = v end
    ropts.stdin = env_stdin(s)
    local r = self:must(input, "running container " .. s.name, run_command(cli, s, d, self.task), ropts)
    local lines = {}
    for line in r.stdout:gmatch("[^\r\n]+") do lines[#lines + 1] = line end
    id = trim(lines[#lines] or "")
  elseif not have.running then
    log.info("starting the stopped container %s", s.name)
    self:must(input, "starting container " .. s.name, ssh.quote(cli, "start", s.name), opts)
    id = have.id
  else
    log.info("container %s is running with the service's settings", s.name)
    id = have.id
  end
  self:record(s, { name = s.name, id = id, image = s.image, ports = json.array(s.host_ports), running = true })
  self.result.stdout = id
  self.result.status = 0
end

-- target is the container a STOP or REMOVE acts on: the service's, else
-- the one Coopr's automator started (config[<image_name>].id).
function DockerAutomator:target(input, cli, opts, s)
  if self:inspect(input, cli, opts, s.name) then return s.name end
  local old = self.task.config[s.image]
  if type(old) == "table" and type(old.id) == "string" and old.id:match("^%x+$") then
    if self:inspect(input, cli, opts, old.id) then return old.id end
  end
  return nil
end

function DockerAutomator:stop(input)
  local s = self:spec(input)
  local cli, opts = self:cli(input, input.fields)
  local target = self:target(input, cli, opts, s)
  if target == nil then
    log.info("no container %s on %s: nothing to stop", s.name, tostring(input.ipaddress))
  else
    local t = tonumber(input.fields.stop_timeout) or 10
    self:must(input, "stopping container " .. target, ssh.quote(cli, "stop", "-t", ("%d"):format(t), target), opts)
  end
  local entry = copy(copy(self.task.config.docker)[s.service])
  entry.name, entry.image, entry.running = s.name, s.image, false
  entry.ports = json.array(entry.ports or {})
  self:record(s, entry)
  self.result.status = 0
end

function DockerAutomator:remove(input)
  local s = self:spec(input)
  local cli, opts = self:cli(input, input.fields)
  local target = self:target(input, cli, opts, s)
  if target == nil then
    log.info("no container %s on %s: nothing to remove", s.name, tostring(input.ipaddress))
  else
    self:must(input, "removing container " .. target, ssh.quote(cli, "rm", "-f", target), opts)
  end
  self:record(s, nil)
  self.result.status = 0
end
