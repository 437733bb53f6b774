-- The shell automator: the Loom port of Coopr's ShellAutomator.
--
-- BOOTSTRAP ships the automator's resources (scripts/ and archives/ in the
-- hook's work dir, as Coopr laid them out) and this plugin's shell library
-- (lib/: the wrapper and loom_lookup_key) to a cache dir on the node.
-- INSTALL, CONFIGURE, INITIALIZE, START, STOP and REMOVE then run
-- fields.script with fields.args in <cache>/scripts, with that dir on PATH,
-- through sudo unless the SSH user is root.
--
-- What Loom does differently from Coopr (issue 3 §5), and why:
--   * every step of a hook runs on ONE pooled SSH connection: Coopr opened
--     8 TCP+SSH handshakes per bootstrap, which dominated its run time;
--   * resources travel as ONE tar stream for all directories
--     (conn:upload_dir), swapped into place by the same command, not a
--     local tarball + scp + untar per resource;
--   * the host key is verified: ssh.from_input pins config.ssh_host_keys
--     (recorded by the provider at CONFIRM), otherwise loomd's known_hosts
--     apply (strict). Coopr connected with verification off;
--   * the task JSON, which carries credentials, reaches the script on
--     stdin and lives on the node only while the script runs, in a 0700
--     dir as 0600 files that the wrapper removes on every way out; a
--     script stopped by a timeout is killed with its whole process group
--     (as root too) and the binding then removes the dir (exec's cleanup).
--     Coopr left <taskId>.json on every node for good;
--   * arguments are split like shell words and quoted, never interpolated
--     into a command line (fields.args_shell opts back into Coopr's way);
--   * the script's stdout and stderr come back in the result, on success
--     and on failure, so a failed task shows why.

local loom = require("loom")
local json = require("loom.json")
local ssh = require("loom.ssh")
local fs = require("loom.fs")

ShellAutomator = loom.Automator:extend("ShellAutomator")

-- Keep in sync with cache_dir's default in shell.json. BOOTSTRAP gets no
-- fields (Coopr passes none), so it cannot read the parameter's default.
local DEFAULT_CACHE_DIR = "/var/cache/loom/shell"

-- The resource directories of the hook's work dir that BOOTSTRAP ships.
local RESOURCES = { "scripts", "archives" }

-- A service action whose cache dir lacks the wrapper (a cache_dir other
-- than BOOTSTRAP's, or a node wiped since) exits with this status and
-- marker; the automator then ships the files and runs the script again.
local NO_LIB_STATUS = 97
local NO_LIB_MARKER = "loom-shell: library missing"

------------------------------------------------------------------------
-- Small helpers
------------------------------------------------------------------------

-- split_words splits fields.script/args the way a shell splits words,
-- with single quotes, double quotes and backslashes, but without any
-- expansion: Coopr pasted args into a command line unquoted, so existing
-- service definitions expect shell-like splitting, and this gives them
-- that without letting $(...) or ; through.
local function split_words(s, what)
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
      cur = cur or "" -- '' is an empty word, not nothing
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
    error({ kind = "config", message = ("%s has an unbalanced %s quote: %s"):format(what, quote, s) }, 0)
  end
  if cur ~= nil then words[#words + 1] = cur end
  return words
end

-- Task data for the wrapper (lib/loom-wrapper.sh): line 1 is the task
-- JSON, then one "path<TAB>value" line per value for loom_lookup_key,
-- which needs nothing but sh and awk on the node.

local function escape(s)
  return (s:gsub("\\", "\\\\"):gsub("\n", "\\n"):gsub("\t", "\\t"):gsub("\r", "\\r"))
end

local function scalar_text(v)
  if type(v) == "number" then
    -- Integers as integers: tostring would give 1e+15 for big ids.
    if v == math.floor(v) and math.abs(v) < 2 ^ 53 then return ("%.0f"):format(v) end
    return tostring(v)
  end
  return tostring(v)
end

-- A JSON array decodes to a sequence; anything else with keys is an object.
local function is_array(t)
  local n = #t
  if n == 0 then return false end
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  return count == n
end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  return keys
end

local function flatten(v, path, out)
  if type(v) ~= "table" then
    out[#out + 1] = escape(path) .. "\t" .. escape(scalar_text(v))
    return
  end
  local parts = {}
  if is_array(v) then
    -- Coopr's lookup printed arrays space-separated; items keep their own
    -- 0-based paths (json.sh's numbering).
    for i, item in ipairs(v) do
      parts[#parts + 1] = type(item) == "table" and json.encode(item) or scalar_text(item)
      flatten(item, path .. "/" .. (i - 1), out)
    end
  else
    -- An object prints its keys, so a script can loop over them
    -- (for n in $(loom_lookup_key config/nodes)).
    for _, k in ipairs(sorted_keys(v)) do
      parts[#parts + 1] = k
      flatten(v[k], path == "" and k or (path .. "/" .. k), out)
    end
  end
  if path ~= "" then
    -- A third field marks a container: coopr_lookup_key, like Coopr's
    -- json.sh, matches leaves only.
    out[#out + 1] = escape(path) .. "\t" .. escape(table.concat(parts, " ")) .. "\tc"
  end
end

-- task_data is the wrapper's stdin: the JSON, then the lookup table.
local function task_data(task)
  local lines = { json.encode(task) }
  flatten(task, "", lines)
  return table.concat(lines, "\n") .. "\n"
end

-- truthy reads a checkbox field: a Coopr server sends fields as strings.
local function truthy(v)
  return v == true or v == "true" or v == "1" or v == "yes" or v == "on"
end

-- Hints appended to binding errors, by kind: what the operator can do.
local HINTS = {
  host_key = "the node's host key is not the one recorded for it: if the node was legitimately reinstalled, "
    .. "run CONFIRM again so the provider records its new keys (config.ssh_host_keys), or add them to loomd --known-hosts",
  auth = "check config[\"ssh-auth\"] (user, password or identityfile) and that this user may log in"
    .. " and, unless it is root, run sudo",
  connect = "check that the node is up, the address is right and sshd listens on that port",
  timeout = "the node or the script was too slow: raise the shell type's timeouts in shell.json, "
    .. "the timeout field, or loomd run --timeout",
  transport_lost = "the SSH connection dropped mid-step; the task can be run again",
  permission = "check that the SSH user may write the cache dir (through sudo unless it is root)",
  io = "check the cache dir on the node (disk space, permissions) and the resources in the work dir",
  -- A local path refused by loomd's sandbox, while connecting: the key file.
  key_file = "ssh-auth.identityfile must be in this automator's work dir or in a declared resource folder of the task's "
    .. "provider, in the task's tenant (see \"Trust model\" in docs/security.md)",
}

------------------------------------------------------------------------
-- The automator
------------------------------------------------------------------------

-- where names the node and task for error messages: user@host:port, task.
function ShellAutomator:where(input)
  local auth = input.sshauth or {}
  local user = auth.user or self.task.config.sshuser or "root"
  local port = tonumber(auth.port) or 22
  return ("%s@%s:%d (task %s, %s)"):format(user, tostring(input.ipaddress), port,
    tostring(self.task.taskId), tostring(self.task.taskName))
end

-- fail raises a structured error that says what failed, where, and what
-- to do. Binding errors keep their kind and fields (a "command" error's
-- stdout/stderr reach the result that way).
function ShellAutomator:fail(input, what, err)
  local e = {}
  if type(err) == "table" then
    for k, v in pairs(err) do e[k] = v end
  else
    e.kind, e.message = "error", tostring(err)
  end
  local msg = ("shell: %s on %s failed: %s"):format(what, self:where(input), tostring(e.message))
  local hint = HINTS[e.kind]
  if e.kind == "permission" and what == "connecting" then hint = HINTS.key_file end
  if hint then msg = msg .. " (" .. hint .. ")" end
  e.message = msg
  self.result.status = 1
  error(e, 0)
end

-- try runs fn(...) and turns whatever it raises into a fail().
function ShellAutomator:try(input, what, fn, ...)
  local ok, res = pcall(fn, ...)
  if not ok then self:fail(input, what, res) end
  return res
end

-- connection opens (or reuses from loomd's pool) the SSH connection to the
-- node, once per hook: every step below shares it. ssh.from_input takes
-- the address from input.ipaddress, the credentials from input.sshauth,
-- and pins config.ssh_host_keys; without pins loomd's known_hosts apply.
-- sshauth.port is a Loom addition for nodes whose sshd is not on 22 (the
-- static provider sets it).
function ShellAutomator:connection(input)
  if self._conn == nil then
    local opts = {}
    local auth = input.sshauth or {}
    if auth.port ~= nil then opts.port = tonumber(auth.port) end
    self._conn = self:try(input, "connecting", ssh.from_input, input, self.task, opts)
  end
  return self._conn
end

-- remote runs one step on the node: conn:<method>(...) on the hook's
-- connection, with failures turned into fail(). Steps ask for the
-- connection each time (it is memoized), which keeps "one connection per
-- hook" a property of connection() alone.
function ShellAutomator:remote(input, what, method, ...)
  local conn = self:connection(input)
  return self:try(input, what, conn[method], conn, ...)
end

-- sudo is how remote steps get root: none for root, else sudo, with the
-- SSH password as the sudo password when the node gave us one (sudo -n
-- otherwise, which needs NOPASSWD and fails fast without it).
function ShellAutomator:sudo(input)
  local auth = input.sshauth or {}
  local user = auth.user or self.task.config.sshuser or "root"
  if user == "root" then return nil end
  if type(auth.password) == "string" and auth.password ~= "" then
    return { password = auth.password }
  end
  return true
end

local function check_cache_dir(dir)
  if type(dir) ~= "string" or not dir:match("^/[%w%._/%-]+$") or dir:match("^/+$") or dir:match("/%.%.?/")
      or dir:match("/%.%.?$") then
    error({ kind = "config", message = ("cache_dir %q must be an absolute path of letters, digits, '.', '_', '-' "
      .. "and '/', other than /"):format(tostring(dir)) }, 0)
  end
  return (dir:gsub("/+$", ""))
end

-- ship copies scripts/, archives/ and lib/ into <cache> on the node in
-- ONE command: a single tar stream carrying the three trees goes into a
-- staging dir, then the same shell swaps the staging dirs in, so a script
-- never sees a half-copied tree and files removed from the resources
-- disappear from the node too.
function ShellAutomator:ship(input, cache)
  local sudo = self:sudo(input)
  local token = ("%s.%d.%d"):format((tostring(self.task.taskId):gsub("[^%w%-]", "_")), os.time(), math.random(1e9))
  local staging = cache .. "/.incoming." .. token
  local sources, shipped = {}, {}
  for _, name in ipairs(RESOURCES) do
    -- A resource type with nothing synced has no dir; Coopr skipped it too.
    if fs.exists(name) then
      sources[name] = name
      shipped[#shipped + 1] = name
    end
  end
  sources.lib = self.env.plugin_dir .. "/lib"
  -- follow_links: resources are links into loomd's versioned store (as
  -- Coopr kept them); the node gets the files they point to (tar -h).
  shipped[#shipped + 1] = "lib"

  local q = ssh.quote
  -- Every exec on the node counts (a few ms each, more on a busy node):
  -- the current trees go aside with one mv, the new ones in with another.
  local swap = table.concat({
    "set -e",
    "cache=" .. q(cache) .. "; new=" .. q(staging) .. "; old=\"$new.old\"",
    "mkdir -p \"$new/scripts\" \"$new/archives\" \"$new/lib\" \"$old\" \"$cache/run\"",
    "chmod 0755 \"$cache\" \"$new/scripts\" \"$new/archives\" \"$new/lib\"",
    "chmod 0700 \"$cache/run\"",
    "set --",
    "for d in scripts archives lib; do if [ -e \"$cache/$d\" ]; then set -- \"$@\" \"$cache/$d\"; fi; done",
    "if [ $# -gt 0 ]; then mv -- \"$@\" \"$old/\"; fi",
    "mv -- \"$new/scripts\" \"$new/archives\" \"$new/lib\" \"$cache/\"",
    -- The old trees, this staging dir, those of BOOTSTRAPs that were
    -- interrupted, and the *.old dirs earlier versions left.
    "rm -rf -- \"$cache\"/.incoming.* \"$cache/scripts.old\" \"$cache/archives.old\" \"$cache/lib.old\"",
  }, "\n")
  local st = self:remote(input, "shipping " .. table.concat(shipped, ", ") .. " to " .. cache, "upload_dir", sources,
    staging, { sudo = sudo, after = swap, follow_links = true })
  return ("%s (%d files)"):format(table.concat(shipped, ", "), st.files)
end

function ShellAutomator:bootstrap(input)
  local cache = DEFAULT_CACHE_DIR
  local service = self.task.config.service
  if service and service.action and service.action.fields and service.action.fields.cache_dir then
    cache = service.action.fields.cache_dir
  end
  cache = self:try(input, "checking the cache dir", check_cache_dir, cache)
  local shipped = self:ship(input, cache)
  log.info("shipped %s to %s:%s", shipped, tostring(input.ipaddress), cache)
  self.result.stdout = ("shipped %s to %s"):format(shipped, cache)
  self.result.status = 0
end

-- command is the remote command line of a service action. The wrapper is
-- run with sh, so a lost execute bit on the node does not matter. run_id
-- goes into the name of the wrapper's task data dir, so that cleanup()
-- finds that dir and no other.
local function command(cache, words, run_id, shell_args)
  local q = ssh.quote
  local lib, scripts = cache .. "/lib", cache .. "/scripts"
  local quoted = {}
  for i, w in ipairs(words) do quoted[i] = q(w) end
  local env = "PATH=" .. q(scripts .. ":" .. lib) .. ":$PATH; LOOM_RUN_ID=" .. q(run_id) .. "; export PATH LOOM_RUN_ID"
  if shell_args ~= nil then
    -- args_shell: the wrapper hands these to the node's shell, as Coopr did.
    env = env .. "; LOOM_SHELL_ARGS=" .. q(shell_args) .. "; export LOOM_SHELL_ARGS"
  end
  return table.concat({
    "[ -f " .. q(lib .. "/loom-wrapper.sh") .. " ] && [ -d " .. q(scripts) .. " ] || { echo "
      .. q(NO_LIB_MARKER) .. " >&2; exit " .. NO_LIB_STATUS .. "; }",
    "cd " .. q(scripts),
    env,
    "exec sh " .. q(lib .. "/loom-wrapper.sh") .. " " .. table.concat(quoted, " "),
  }, "\n")
end

-- cleanup is the shell code the SSH binding runs after it stopped a
-- script (timeout, hook deadline): the script's whole process group is
-- dead by then, the wrapper too if it needed KILL, so its task data (with
-- the task's credentials) is removed from here. run_id is made of
-- letters, digits, '-' and '_', so the glob needs no quoting.
local function cleanup(cache, run_id)
  return "rm -rf -- " .. ssh.quote(cache .. "/run") .. "/task.*." .. run_id .. ".*"
end

-- run_script is every service action: INSTALL through REMOVE.
function ShellAutomator:run_script(input)
  local fields = input.fields
  -- A definition without cache_dir (Coopr's own shell_automator.json)
  -- gets the default BOOTSTRAP used.
  local cache = self:try(input, "checking the cache dir", check_cache_dir, fields.cache_dir or DEFAULT_CACHE_DIR)
  local words = self:try(input, "reading fields.script", split_words, fields.script, "fields.script")
  local args = fields.args
  local shell_args = nil
  if truthy(fields.args_shell) and type(args) == "string" and args ~= "" then
    -- Coopr's behaviour, by opt-in: the node's shell splits and expands
    -- args ($VARS, globs, quotes, and command substitution too).
    shell_args = args
  elseif type(args) == "table" then
    -- A JSON array of arguments (a Loom extension): taken word for word.
    for _, a in ipairs(args) do words[#words + 1] = scalar_text(a) end
  elseif args ~= nil and args ~= "" then
    for _, w in ipairs(self:try(input, "reading fields.args", split_words, tostring(args), "fields.args")) do
      words[#words + 1] = w
    end
  end
  if #words == 0 then
    self:fail(input, "reading fields.script", { kind = "config", message = "fields.script is empty" })
  end
  local timeout = fields.timeout
  if timeout == "" then timeout = nil end

  local run_id = ("%s-%d-%d"):format((tostring(self.task.taskId):gsub("[^%w%-]", "_")), os.time(), math.random(1e9))
  local cmd = command(cache, words, run_id, shell_args)
  local sudo = self:sudo(input)
  local off = { [false] = true, ["false"] = true, ["0"] = true, ["no"] = true, ["off"] = true }
  local opts = {
    stdin = task_data(self.task),
    sudo = sudo,
    -- Coopr ran scripts with `sudo -E`, so they saw the SSH user's
    -- variables; sudo here resets them, and the binding gives them back,
    -- read in the script's own session (no extra round trip).
    login_env = sudo ~= nil and not off[fields.sudo_env],
    -- The command is POSIX sh and starts the wrapper with sh: the login
    -- shell's rc files ran once for the session already, and a second
    -- start would run them again (slow on nodes with a heavy .bashrc).
    shell = "/bin/sh",
    timeout = timeout,
    cleanup = cleanup(cache, run_id),
    -- Operators see the script's progress with --log-level debug; the
    -- logger redacts the task's secrets.
    on_stdout = function(line) log.debug("%s: %s", words[1], line) end,
    on_stderr = function(line) log.debug("%s (stderr): %s", words[1], line) end,
  }
  log.info("running %s (%d args) in %s/scripts on %s", words[1], #words - 1, cache, tostring(input.ipaddress))
  local what = "running " .. words[1]
  local r = self:remote(input, what, "exec", cmd, opts)
  if r.exit_code == NO_LIB_STATUS and r.stderr:find(NO_LIB_MARKER, 1, true) then
    log.info("%s has no shell library yet (BOOTSTRAP used another cache_dir, or the node was wiped): shipping it", cache)
    self:ship(input, cache)
    r = self:remote(input, what, "exec", cmd, opts)
  end

  self.result.stdout = r.stdout
  self.result.stderr = r.stderr
  if not r.ok then
    local how = r.timed_out and ("timed out; " .. tostring(r.stopped))
      or r.signal and ("was killed by signal " .. r.signal)
      or ("exited with status " .. tostring(r.exit_code))
    self:fail(input, what, {
      kind = r.timed_out and "timeout" or "command",
      message = ("%s %s; its stdout and stderr are in this result"):format(words[1], how),
      command = table.concat(words, " "),
      stdout = r.stdout,
      stderr = r.stderr,
      exit_code = r.exit_code,
      signal = r.signal,
      timed_out = r.timed_out,
      stopped = r.stopped,
    })
  end
  self.result.status = 0
end

ShellAutomator.install = ShellAutomator.run_script
ShellAutomator.configure = ShellAutomator.run_script
ShellAutomator.init = ShellAutomator.run_script
ShellAutomator.start = ShellAutomator.run_script
ShellAutomator.stop = ShellAutomator.run_script
ShellAutomator.remove = ShellAutomator.run_script
-- CHECK (loomd plan --refresh): the script's exit status says whether the
-- service still runs.
ShellAutomator.check = ShellAutomator.run_script
