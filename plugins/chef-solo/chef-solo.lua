-- The chef-solo automator: the Loom port of Coopr's ChefSoloAutomator.
--
-- BOOTSTRAP installs Chef when the node has no chef-solo (Coopr's order:
-- yum, apt when it offers Chef 12.5 or later, then Chef's omnitruck
-- installer) and ships the automator's resources (cookbooks/ and
-- data_bags/ archives, roles/ files, in the hook's work dir as Coopr laid
-- them out) to the node's chef dir (/var/chef, chef-solo's own), with a
-- solo.rb that names them. INSTALL, CONFIGURE, INITIALIZE, START, STOP and
-- REMOVE run chef-solo with fields.run_list as the override run list and
-- the JSON attributes Coopr built (lib/chef/attributes.lua).
--
-- What Loom does differently from Coopr, and why:
--   * the resources are shipped once per host: BOOTSTRAP compares the
--     SHA-256 of what the work dir holds with the same digest computed on
--     the node over what it has (sha256sum of every file), and ships only
--     when they differ, so a node whose copy was changed or damaged by hand
--     gets it again too (Coopr tarred and copied everything at every
--     BOOTSTRAP, in 9 connections);
--     the new trees go in as one tar stream and are swapped into place by
--     the same command, so a run never sees a half-copied cookbook;
--   * one pooled, host-key-checked SSH connection per hook;
--   * the attributes JSON (which carries the cluster config) lives on the
--     node only while chef-solo runs, 0600 in a 0700 dir (Coopr left
--     /var/cache/coopr/<taskId>.json on the node for good);
--   * chef-solo gets -c <chef_dir>/loom-solo.rb, so the paths do not
--     depend on Chef's version (chef-solo 14 and later default to local
--     mode, whose paths are not Chef 12's);
--   * the run list is checked and quoted, never pasted into a command;
--   * chef-solo's output comes back in the result, on failure its FATAL
--     lines in the message.

local loom = require("loom")
local json = require("loom.json")
local ssh = require("loom.ssh")
local fs = require("loom.fs")
local crypto = require("loom.crypto")
local time = require("loom.time")
local attributes = require("lib.chef.attributes")

ChefSoloAutomator = loom.Automator:extend("ChefSoloAutomator")

-- Keep in sync with chef_dir's default in chef-solo.json: BOOTSTRAP gets
-- no fields (Coopr passes none).
local DEFAULT_CHEF_DIR = "/var/chef"
local DEFAULT_CHEF_VERSION = "12.21.3"
local DEFAULT_INSTALLER = "https://omnitruck.chef.io/install.sh"

-- The resource types BOOTSTRAP ships, each into <chef_dir>/<type>.
local RESOURCES = { "cookbooks", "data_bags", "roles" }

-- Where omnibus packages put chef-solo when /usr/bin has no link to it.
local PATH_EXTRA = "/opt/chef/bin:/opt/cinc/bin"

-- Exit statuses (and markers) of a run that finds the node unprepared: the
-- automator then ships, or installs Chef, and runs again.
local NOT_SHIPPED, NOT_SHIPPED_MARK = 97, "loom-chef-solo: resources not shipped"
local NO_CHEF, NO_CHEF_MARK = 98, "loom-chef-solo: chef-solo not found"

-- The most files and the deepest nesting the digest walk accepts: a link
-- loop in a resource is an error, not a hang.
local MAX_FILES, MAX_DEPTH = 200000, 64

-- A fresh cloud machine often runs cloud-init or unattended upgrades at
-- first boot, which hold the package manager's lock: the install waits and
-- tries again (within the hook deadline) when it says so.
local LOCK_WAITS = { 10, 20, 40, 80 }
local LOCK_MARKS = { "Could not get lock", "Unable to acquire the dpkg frontend lock", "is another process using it",
  "Existing lock /var/run/yum.pid", "another app is currently holding the yum lock" }

local HINTS = {
  host_key = "the node's host key is not the one recorded for it: if the node was legitimately reinstalled, run CONFIRM again"
    .. " so the provider records its new keys (config.ssh_host_keys), or add them to loomd --known-hosts",
  auth = "check config[\"ssh-auth\"] (user, password or identityfile), that this user may log in and, unless it is root, run sudo",
  connect = "check that the node is up, the address is right and sshd listens on that port",
  timeout = "the node or chef-solo was too slow: raise the chef-solo type's timeouts in its definition, or the timeout field",
  transport_lost = "the SSH connection dropped mid-step; the task can be run again",
  permission = "check that the SSH user may run sudo (chef-solo runs as root) and write the chef dir through it",
}

------------------------------------------------------------------------
-- Helpers
------------------------------------------------------------------------

local function trim(s) return (tostring(s or ""):match("^%s*(.-)%s*$")) end


local function check_chef_dir(dir)
  if type(dir) ~= "string" or not dir:match("^/[%w%._/%-]+$") or dir:match("^/+$") or dir:match("/%.%.?/")
      or dir:match("/%.%.?$") then
    error({ kind = "config", message = ("chef_dir %q must be an absolute path of letters, digits, '.', '_', '-' and '/', other than /")
      :format(tostring(dir)) }, 0)
  end
  return (dir:gsub("/+$", ""))
end

-- run_list checks fields.run_list the way chef-solo reads -o: items
-- separated by commas, each recipe[cookbook(::recipe)(@version)],
-- role[name], or a bare cookbook(::recipe). Whitespace is removed first,
-- as Coopr did.
local function run_list(v)
  local s = tostring(v or ""):gsub("%s+", "")
  if s == "" then
    error({ kind = "config", message = "run_list is empty: give recipe[...] and role[...] items separated by commas" }, 0)
  end
  local items = {}
  for item in (s .. ","):gmatch("([^,]*),") do
    local ok = item:match("^recipe%[[%w_%-%.]+::[%w_%-%.]+@?[%d%.]*%]$") or item:match("^recipe%[[%w_%-%.]+@?[%d%.]*%]$")
      or item:match("^role%[[%w_%-%.]+%]$") or item:match("^[%w_%-%.]+::[%w_%-%.]+$") or item:match("^[%w_%-%.]+$")
    if not ok then
      error({ kind = "config", message = ("run_list item %q is not recipe[cookbook::recipe], role[name] or a cookbook name"):format(item) }, 0)
    end
    items[#items + 1] = item
  end
  return table.concat(items, ",")
end

-- solo_rb is chef-solo's config: the paths BOOTSTRAP ships to.
local function solo_rb(dir)
  return table.concat({
    "# Written by Loom's chef-solo automator: where BOOTSTRAP ships the resources.",
    ("cookbook_path [%q]"):format(dir .. "/cookbooks"),
    ("data_bag_path %q"):format(dir .. "/data_bags"),
    ("role_path %q"):format(dir .. "/roles"),
    ("file_cache_path %q"):format(dir .. "/cache"),
    "",
  }, "\n")
end

-- walk adds a line "<sha256>  <path>" (sha256sum's format) for every file
-- under rel (links followed, as Coopr's tar -h did, so that the node gets
-- regular files) to out, keyed by path. A path is read as a file first
-- and listed as a dir when that fails: resources hold far more files than
-- dirs, and each failed try costs an error.
local function walk(rel, out, depth, count)
  if depth > MAX_DEPTH then
    error({ kind = "config", message = rel .. ": nested more than " .. MAX_DEPTH .. " levels (a link loop?)" }, 0)
  end
  local ok, content = pcall(fs.read, rel)
  if ok then
    count[1] = count[1] + 1
    if count[1] > MAX_FILES then
      error({ kind = "config", message = ("the resources hold more than %d files"):format(MAX_FILES) }, 0)
    end
    out[#out + 1] = { rel, crypto.sha256(content) .. "  " .. rel .. "\n" }
    return
  end
  local lok, names = pcall(fs.list, rel)
  if not lok then
    -- Neither a file nor a dir we may read: say what reading said.
    error(content, 0)
  end
  for _, name in ipairs(names) do
    walk(rel .. "/" .. name, out, depth + 1, count)
  end
end

--- digest is the SHA-256 of sha256sum's lines for every file of the
--- resources in the work dir, sorted by path in byte order: what
--- REMOTE_DIGEST computes on the node over what it has. It returns the
--- digest, the resource types present and the number of files.
local function digest()
  local files, present, count = {}, {}, { 0 }
  for _, name in ipairs(RESOURCES) do
    if fs.exists(name) then
      present[#present + 1] = name
      walk(name, files, 0, count)
    end
  end
  table.sort(files, function(a, b) return a[1] < b[1] end)
  local lines = {}
  for i, f in ipairs(files) do lines[i] = f[2] end
  return crypto.sha256(table.concat(lines)), present, count[1]
end

-- REMOTE_DIGEST is the same digest over the node's copy, in the chef dir
-- ($dir): sha256sum of every file, sorted by path in byte order.
local REMOTE_DIGEST = "(cd \"$dir\" && find cookbooks data_bags roles -type f -print0 2>/dev/null"
  .. " | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -d ' ' -f 1)"

------------------------------------------------------------------------
-- SSH
------------------------------------------------------------------------

function ChefSoloAutomator:where(input)
  local auth = input.sshauth or {}
  local user = auth.user or self.task.config.sshuser or "root"
  return ("%s@%s:%d (task %s, %s)"):format(user, tostring(input.ipaddress), tonumber(auth.port) or 22,
    tostring(self.task.taskId), tostring(self.task.taskName))
end

function ChefSoloAutomator:fail(input, what, err)
  local e = {}
  if type(err) == "table" then
    for k, v in pairs(err) do e[k] = v end
  else
    e.kind, e.message = "chef-solo", tostring(err)
  end
  local msg = ("chef-solo: %s on %s failed: %s"):format(what, self:where(input), tostring(e.message))
  if HINTS[e.kind] then msg = msg .. " (" .. HINTS[e.kind] .. ")" end
  e.message = msg
  self.result.status = 1
  error(e, 0)
end

-- try runs fn(...) and returns what it returns; an error it raises fails
-- the task, saying what was being done.
function ChefSoloAutomator:try(input, what, fn, ...)
  local out = { pcall(fn, ...) }
  if not out[1] then self:fail(input, what, out[2]) end
  return unpack(out, 2, table.maxn(out))
end

function ChefSoloAutomator:connection(input)
  if self._conn == nil then
    local opts = {}
    local auth = input.sshauth or {}
    if auth.port ~= nil then opts.port = tonumber(auth.port) end
    self._conn = self:try(input, "connecting", ssh.from_input, input, self.task, opts)
  end
  return self._conn
end

function ChefSoloAutomator:remote(input, what, method, ...)
  local conn = self:connection(input)
  return self:try(input, what, conn[method], conn, ...)
end

-- sudo: chef-solo and the chef dir need root. None for root; the SSH
-- password when there is one; else sudo -n (NOPASSWD).
function ChefSoloAutomator:sudo(input)
  local auth = input.sshauth or {}
  local user = auth.user or self.task.config.sshuser or "root"
  if user == "root" then return nil end
  if type(auth.password) == "string" and auth.password ~= "" then return { password = auth.password } end
  return true
end

------------------------------------------------------------------------
-- Installing Chef, shipping the resources
------------------------------------------------------------------------

-- probe returns the path of chef-solo on the node (nil without one) and
-- the digest of the resources the node has (nil when it was never
-- prepared: no solo.rb). It runs as root: the shipped files are root's.
function ChefSoloAutomator:probe(input, dir)
  local r = self:remote(input, "looking for chef-solo", "exec", table.concat({
    "PATH=\"$PATH:" .. PATH_EXTRA .. "\"; dir=" .. ssh.quote(dir),
    "if command -v chef-solo >/dev/null 2>&1; then echo \"chef-solo=$(command -v chef-solo)\"; fi",
    "if [ -f \"$dir/loom-solo.rb\" ]; then echo \"digest=$" .. REMOTE_DIGEST .. "\"; fi",
    "true",
  }, "\n"), { sudo = self:sudo(input) })
  return r.stdout:match("chef%-solo=([^\n]+)"), r.stdout:match("digest=(%x+)")
end

-- install_chef installs Chef as Coopr did: yum, then apt when the
-- candidate is Chef 12.5 or later (Coopr's bundled cookbooks need it),
-- then Chef's installer script (omnitruck) with the chosen version.
function ChefSoloAutomator:install_chef(input, f)
  local mode = trim(f.install_chef)
  if mode == "" then mode = "auto" end
  if mode == "never" then
    self:fail(input, "looking for chef-solo", { kind = "chef-solo",
      message = "chef-solo is not on the node (PATH, " .. PATH_EXTRA .. ") and install_chef is never: install Chef in the image" })
  end
  if mode ~= "auto" then
    self:fail(input, "reading install_chef", { kind = "config", message = ("install_chef %q must be auto or never"):format(mode) })
  end
  local q = ssh.quote
  local version = trim(f.chef_version or DEFAULT_CHEF_VERSION)
  local url = trim(f.chef_installer_url or DEFAULT_INSTALLER)
  if url == "" then url = DEFAULT_INSTALLER end
  local script = table.concat({
    "PATH=\"$PATH:" .. PATH_EXTRA .. "\"",
    "if command -v yum >/dev/null 2>&1 && yum -q -y install chef; then exit 0; fi",
    "if command -v apt-cache >/dev/null 2>&1; then",
    "  v=$(apt-cache policy chef 2>/dev/null | awk '/Candidate:/ {print $2}')",
    "  case \"$v\" in ''|'(none)') ;; *)",
    "    if [ \"$(printf '%s\\n%s\\n' 12.5 \"${v%%[-+~]*}\" | sort -V | head -n 1)\" = 12.5 ]; then",
    "      DEBIAN_FRONTEND=noninteractive apt-get -q -y install chef && exit 0",
    "    fi;;",
    "  esac",
    "fi",
    "tmp=$(mktemp) || exit 1",
    "trap 'rm -f \"$tmp\"' EXIT",
    "if command -v curl >/dev/null 2>&1; then curl -fsSL " .. q(url) .. " -o \"$tmp\" || exit 1",
    "elif command -v wget >/dev/null 2>&1; then wget -qO \"$tmp\" " .. q(url) .. " || exit 1",
    "else echo 'neither curl nor wget is on the node to fetch Chef' >&2; exit 1; fi",
    "sh \"$tmp\"" .. (version ~= "" and (" -v " .. q(version)) or ""),
  }, "\n")
  log.info("installing Chef%s on %s", version ~= "" and (" " .. version) or "", tostring(input.ipaddress))
  for attempt = 1, #LOCK_WAITS + 1 do
    local r = self:remote(input, "installing Chef", "exec", script, { sudo = self:sudo(input) })
    if r.ok then return end
    local out = r.stdout .. r.stderr
    local wait = LOCK_WAITS[attempt]
    local busy = false
    for _, m in ipairs(LOCK_MARKS) do
      if out:find(m, 1, true) then busy = true end
    end
    local left = time.remaining()
    if not busy or wait == nil or (left ~= nil and left - 10 < wait) then
      self.result.stdout, self.result.stderr = r.stdout, r.stderr
      local why = ("the install exited with status %s: %s"):format(tostring(r.exit_code), trim(r.stderr ~= "" and r.stderr or r.stdout):sub(-1000))
      if busy then why = why .. "; the package manager stayed locked (cloud-init or unattended upgrades still running?)" end
      self:fail(input, "installing Chef", { kind = "command", exit_code = r.exit_code, stdout = r.stdout, stderr = r.stderr, message = why })
    end
    log.warn("installing Chef on %s: the package manager is locked by another process; trying again in %ds",
      tostring(input.ipaddress), wait)
    time.sleep(wait)
  end
end

-- ship copies the resource trees into <dir> in ONE command: one tar stream
-- into a staging dir, swapped into place by the same shell, which then
-- writes solo.rb. Resource types without local files get empty dirs
-- (Coopr made them: recipes may fail without data_bags/).
function ChefSoloAutomator:ship(input, dir, present)
  local q = ssh.quote
  local sudo = self:sudo(input)
  local token = ("%s.%d.%s"):format((tostring(self.task.taskId):gsub("[^%w%-]", "_")), os.time(), crypto.random(4))
  local staging = dir .. "/.incoming." .. token
  local finish = table.concat({
    "set -e",
    "dir=" .. q(dir) .. "; new=" .. q(staging),
    "mkdir -p \"$new/cookbooks\" \"$new/data_bags\" \"$new/roles\" \"$dir/cache\"",
    "chmod 0755 \"$dir\"",
    "for d in cookbooks data_bags roles; do",
    "  rm -rf \"$dir/$d.old\"",
    "  if [ -e \"$dir/$d\" ]; then mv \"$dir/$d\" \"$dir/$d.old\"; fi",
    "  mv \"$new/$d\" \"$dir/$d\"",
    "done",
    "rm -rf \"$dir/cookbooks.old\" \"$dir/data_bags.old\" \"$dir/roles.old\"",
    "rmdir \"$new\"",
    "for old in \"$dir\"/.incoming.*; do [ -e \"$old\" ] && rm -rf \"$old\"; done",
    "cat > \"$dir/loom-solo.rb\" <<'LOOM_SOLO_RB'",
    solo_rb(dir) .. "LOOM_SOLO_RB",
    "mkdir -p \"$dir/.loom-run\"; chmod 0700 \"$dir/.loom-run\"",
  }, "\n")
  if #present == 0 then
    self:remote(input, "preparing " .. dir, "exec", "mkdir -p " .. q(staging) .. "\n" .. finish,
      { sudo = sudo, check = true })
    return "no resources"
  end
  local sources = {}
  for _, name in ipairs(present) do sources[name] = name end
  -- follow_links: synced resources are links into loomd's versioned store.
  local st = self:remote(input, "shipping " .. table.concat(present, ", ") .. " to " .. dir, "upload_dir", sources, staging,
    { sudo = sudo, after = finish, follow_links = true })
  return ("%s (%d files)"):format(table.concat(present, ", "), st.files)
end

-- prepare makes the node ready to run chef-solo: Chef installed, the
-- current resources shipped. It returns what it did, for the result.
function ChefSoloAutomator:prepare(input, f, dir, force_ship)
  local d, present, files = self:try(input, "reading the resources in the work dir", digest)
  local chef, shipped = self:probe(input, dir)
  local did = {}
  if chef == nil then
    self:install_chef(input, f)
    chef = self:probe(input, dir)
    if chef == nil then
      self:fail(input, "installing Chef", { kind = "chef-solo", message = "the install finished but chef-solo is still not on the node" })
    end
    did[#did + 1] = "installed Chef"
  end
  if shipped == d and not force_ship then
    log.info("the resources on %s:%s are current (%d files, digest %s)", tostring(input.ipaddress), dir, files, d:sub(1, 12))
    did[#did + 1] = ("resources current (%d files)"):format(files)
  else
    local what = self:ship(input, dir, present)
    log.info("shipped %s to %s:%s", what, tostring(input.ipaddress), dir)
    did[#did + 1] = "shipped " .. what .. " to " .. dir
  end
  return table.concat(did, "; ")
end

------------------------------------------------------------------------
-- Hooks
------------------------------------------------------------------------

function ChefSoloAutomator:bootstrap(input)
  local f = {}
  local service = self.task.config.service
  if service and service.action and type(service.action.fields) == "table" then f = service.action.fields end
  local dir = self:try(input, "checking the chef dir", check_chef_dir, f.chef_dir or DEFAULT_CHEF_DIR)
  self.result.stdout = self:prepare(input, f, dir, false)
  self.result.status = 0
end

-- fatal picks chef's FATAL and ERROR lines out of its output for the
-- message (the whole output is in stdout and stderr).
local function fatal(out)
  local lines = {}
  for line in tostring(out):gmatch("[^\r\n]+") do
    if line:find("FATAL", 1, true) or line:find("ERROR", 1, true) then lines[#lines + 1] = trim(line) end
  end
  if #lines == 0 then
    local tail = {}
    for line in tostring(out):gmatch("[^\r\n]+") do tail[#tail + 1] = line end
    for i = math.max(1, #tail - 4), #tail do lines[#lines + 1] = trim(tail[i]) end
  end
  return table.concat(lines, " | "):sub(1, 2000)
end

-- runchef is every service action: chef-solo with the override run list
-- and Coopr's JSON attributes.
function ChefSoloAutomator:runchef(input)
  local f = input.fields or {}
  local dir = self:try(input, "checking the chef dir", check_chef_dir, f.chef_dir or DEFAULT_CHEF_DIR)
  local list = self:try(input, "reading fields.run_list", run_list, f.run_list)
  local attrs = self:try(input, "building the JSON attributes", attributes.build, self.task, f.json_attributes)
  local doc = self:try(input, "encoding the JSON attributes", json.encode, attrs)
  local level = trim(f.log_level)
  local levels = { auto = true, trace = true, debug = true, info = true, warn = true, error = true, fatal = true }
  if level ~= "" and not levels[level] then
    self:fail(input, "reading fields.log_level", { kind = "config", message = ("log_level %q must be one of auto, trace, debug, info, warn, error, fatal"):format(level) })
  end
  local timeout = f.timeout
  if timeout == "" then timeout = nil end

  local q = ssh.quote
  local run_id = ("%s-%d-%s"):format((tostring(self.task.taskId):gsub("[^%w%-]", "_")), os.time(), crypto.random(4))
  local file = dir .. "/.loom-run/" .. run_id .. ".json"
  local args = { "chef-solo", "--no-color", "-c", dir .. "/loom-solo.rb", "-j", file, "-o", list }
  if level ~= "" then args[#args + 1] = "-l"; args[#args + 1] = level end
  local cmd = table.concat({
    "PATH=\"$PATH:" .. PATH_EXTRA .. "\"; export PATH",
    "[ -f " .. q(dir .. "/loom-solo.rb") .. " ] || { echo " .. q(NOT_SHIPPED_MARK) .. " >&2; exit " .. NOT_SHIPPED .. "; }",
    "command -v chef-solo >/dev/null 2>&1 || { echo " .. q(NO_CHEF_MARK) .. " >&2; exit " .. NO_CHEF .. "; }",
    "umask 077",
    "cat > " .. q(file) .. " || exit 1",
    ssh.quote(args) .. "; rc=$?",
    "rm -f " .. q(file),
    "exit $rc",
  }, "\n")
  local opts = {
    stdin = doc,
    sudo = self:sudo(input),
    timeout = timeout,
    -- A run stopped by a timeout cannot remove its attributes file.
    cleanup = "rm -f " .. q(file),
    on_stdout = function(line) log.debug("chef-solo: %s", line) end,
    on_stderr = function(line) log.debug("chef-solo (stderr): %s", line) end,
  }
  log.info("running chef-solo -o %s on %s", list, tostring(input.ipaddress))
  local r = self:remote(input, "running chef-solo", "exec", cmd, opts)
  if (r.exit_code == NOT_SHIPPED and r.stderr:find(NOT_SHIPPED_MARK, 1, true))
      or (r.exit_code == NO_CHEF and r.stderr:find(NO_CHEF_MARK, 1, true)) then
    log.info("%s is not prepared (%s): preparing it", tostring(input.ipaddress), trim(r.stderr))
    self:prepare(input, f, dir, true)
    r = self:remote(input, "running chef-solo", "exec", cmd, opts)
  end
  self.result.stdout = r.stdout
  self.result.stderr = r.stderr
  if not r.ok then
    local how = r.timed_out and ("timed out; " .. tostring(r.stopped))
      or r.signal and ("was killed by signal " .. r.signal)
      or ("exited with status " .. tostring(r.exit_code))
    self:fail(input, "running chef-solo -o " .. list, {
      kind = r.timed_out and "timeout" or "command",
      message = ("chef-solo %s: %s"):format(how, fatal(r.stdout .. "\n" .. r.stderr)),
      command = "chef-solo -o " .. list,
      stdout = r.stdout, stderr = r.stderr, exit_code = r.exit_code, signal = r.signal, timed_out = r.timed_out,
    })
  end
  self.result.status = 0
end

ChefSoloAutomator.install = ChefSoloAutomator.runchef
ChefSoloAutomator.configure = ChefSoloAutomator.runchef
ChefSoloAutomator.init = ChefSoloAutomator.runchef
ChefSoloAutomator.start = ChefSoloAutomator.runchef
ChefSoloAutomator.stop = ChefSoloAutomator.runchef
ChefSoloAutomator.remove = ChefSoloAutomator.runchef
