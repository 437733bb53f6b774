-- The static provider: machines that already exist.
--
-- Bare metal, or VMs another tool made, are listed in an inventory JSON
-- (see docs/plugins/static.md). The hooks:
--   CREATE   claims a free host whose labels match the task's flavor and
--            image (and fields.labels), and returns providerid and
--            ssh-auth the way Coopr's providers did;
--   CONFIRM  checks that the host's sshd answers, records its host keys
--            (the inventory's pinned ones when it has them) under
--            result.ssh_host_keys for the automators to enforce, and
--            returns ipaddresses and hostname;
--   DELETE   releases the host (the one its providerid names, else the one
--            the node's claim holds: a CREATE may have claimed a host and
--            failed before it returned providerid). The machine itself is
--            left as it is.
--
-- Claims live in claims.json in the provider's work dir and change only
-- under an exclusive lock (fs.with_lock), so concurrent tasks and loomd
-- processes never hand out the same host twice, and a claim survives a
-- restart. Each claim records the node and task that made it; a CREATE
-- repeated for the same node (Coopr retries tasks) gets the same host.

local loom = require("loom")
local json = require("loom.json")
local fs = require("loom.fs")
local ssh = require("loom.ssh")
local time = require("loom.time")

StaticProvider = loom.Provider:extend("StaticProvider")

local CLAIMS = "claims.json"
local LOCK = "claims.lock"
-- Inline keys are written here (mode 0600), because Coopr's ssh-auth hands
-- automators a key *file* (identityfile), not key material.
local KEY_DIR = "ssh_keys"

------------------------------------------------------------------------
-- Errors
------------------------------------------------------------------------

-- fail raises an error that names the task and says what to do.
function StaticProvider:fail(kind, fmt, ...)
  local msg = ("static %s (task %s): " .. fmt):format(tostring(self.task.taskName), tostring(self.task.taskId), ...)
  self.result.status = 1
  error({ kind = kind, message = msg }, 0)
end

------------------------------------------------------------------------
-- The inventory
------------------------------------------------------------------------

-- Host ids become file names (inline keys), so they are kept tame.
local function safe_name(s)
  return (s:gsub("[^%w%._%-]", "_"))
end

-- labels_from turns "k=v,k2=v2" (or a JSON object) into a table.
local function labels_from(v)
  local out = {}
  if type(v) == "table" then
    for k, val in pairs(v) do out[tostring(k)] = tostring(val) end
  elseif type(v) == "string" then
    for pair in v:gmatch("[^,]+") do
      local k, val = pair:match("^%s*([^=]-)%s*=%s*(.-)%s*$")
      if k == nil or k == "" then
        error({ kind = "config", message = ("fields.labels: %q is not key=value"):format(pair) }, 0)
      end
      out[k] = val
    end
  end
  return out
end

-- load_inventory reads and checks the inventory, so a mistake in it is
-- reported with the host it is in, before anything is claimed.
function StaticProvider:load_inventory(fields)
  local path = fields.inventory or "inventory.json"
  local ok, text = pcall(fs.read, path)
  if not ok then
    self:fail("config", "cannot read the inventory %s: %s (put it in %s or set the inventory field)",
      path, tostring(type(text) == "table" and text.message or text), self.env.work_dir)
  end
  local ok2, inv = pcall(json.decode, text)
  if not ok2 then
    self:fail("config", "inventory %s is not valid JSON: %s", path, tostring(type(inv) == "table" and inv.message or inv))
  end
  if type(inv) ~= "table" or type(inv.hosts) ~= "table" then
    self:fail("config", "inventory %s has no \"hosts\" list", path)
  end
  local seen = {}
  for i, h in ipairs(inv.hosts) do
    local where = ("inventory %s, host #%d"):format(path, i)
    if type(h) ~= "table" or type(h.address) ~= "string" or h.address == "" then
      self:fail("config", "%s: \"address\" is required", where)
    end
    h.port = tonumber(h.port or 22)
    if h.port == nil or h.port < 1 or h.port > 65535 or h.port ~= math.floor(h.port) then
      self:fail("config", "%s (%s): \"port\" must be a TCP port number", where, h.address)
    end
    h.id = tostring(h.id or (h.address .. ":" .. h.port))
    if seen[h.id] then
      self:fail("config", "%s: id %q is used twice (give each host a unique \"id\")", where, h.id)
    end
    seen[h.id] = true
    if h.labels ~= nil and type(h.labels) ~= "table" then
      self:fail("config", "%s (%s): \"labels\" must be an object such as {\"flavor\": \"small\"}", where, h.id)
    end
    h.labels = h.labels or {}
    if h.host_keys ~= nil and type(h.host_keys) ~= "table" then
      self:fail("config", "%s (%s): \"host_keys\" must be an object such as {\"ed25519\": \"AAAA...\"}", where, h.id)
    end
  end
  return inv, path
end

-- check_credentials fails CREATE, before the host is claimed, when the
-- inventory gives a host no usable credentials.
function StaticProvider:check_credentials(h, fields, path)
  local function set(v) return v ~= nil and v ~= "" end
  if h.key_file ~= nil then
    local file = h.key_file:sub(1, 1) == "/" and h.key_file or (self.env.work_dir .. "/" .. h.key_file)
    -- Automators read the key through ssh-auth.identityfile, which loomd
    -- allows only inside a resource folder this type declares.
    local wd = self.env.work_dir .. "/"
    if file:find("/%.%./") or not (file:sub(1, #wd + 5) == wd .. "keys/" or file:sub(1, #wd + 9) == wd .. "ssh_keys/") then
      self:fail("config", "host %s in %s: key_file %s must be in the keys/ or ssh_keys/ folder of %s (declared resource folders, "
        .. "the only ones automators may read)", h.id, path, h.key_file, self.env.work_dir)
    end
    if not fs.exists(file) then
      self:fail("config", "host %s in %s: key_file %s does not exist (relative paths are relative to %s)", h.id, path,
        h.key_file, self.env.work_dir)
    end
  elseif not (set(h.password) or set(h.key) or set(fields.ssh_password) or set(fields.ssh_key)) then
    self:fail("config", "host %s in %s has no password, key or key_file, and the ssh_password/ssh_key fields are "
      .. "empty", h.id, path)
  end
end

-- matches: every requested label must be on the host with the same value.
-- "*" (or "any") on either side matches anything; a list on the host
-- side matches any of its values.
local function matches(host, want)
  for k, v in pairs(want) do
    if v ~= "*" and v ~= "any" then
      local have = host.labels[k]
      local ok = false
      if type(have) == "table" then
        for _, x in ipairs(have) do
          if tostring(x) == v or x == "*" then ok = true end
        end
      elseif have ~= nil then
        ok = have == "*" or tostring(have) == v
      end
      if not ok then return false end
    end
  end
  return true
end

local function describe_labels(want)
  local parts = {}
  for k, v in pairs(want) do parts[#parts + 1] = k .. "=" .. v end
  table.sort(parts)
  return #parts > 0 and table.concat(parts, " ") or "(no labels)"
end

------------------------------------------------------------------------
-- Claims
------------------------------------------------------------------------

local function read_claims()
  if not fs.exists(CLAIMS) then return { claims = {} } end
  local c = json.decode(fs.read(CLAIMS))
  c.claims = c.claims or {}
  return c
end

local function write_claims(c)
  -- fs.write is atomic (temp file renamed over claims.json): a crash
  -- leaves the old claims or the new ones, never half a file.
  fs.write(CLAIMS, json.encode(c, { indent = "  " }))
end

-- with_claims runs fn(claims) under the lock; fn returns whether it
-- changed them, then its results.
local function with_claims(fn)
  return fs.with_lock(LOCK, function()
    local c = read_claims()
    -- A vararg helper, not a results table: results may include nils.
    local function finish(changed, ...)
      if changed then write_claims(c) end
      return ...
    end
    return finish(fn(c.claims))
  end)
end

-- node_key is what a claim belongs to: the node (Coopr's nodeId), which is
-- stable across the node's tasks and retries.
function StaticProvider:node_key()
  local node = self.task.nodeId
  if node == nil or node == "" then
    self:fail("config", "the task has no nodeId; static claims belong to nodes")
  end
  return node
end

------------------------------------------------------------------------
-- SSH credentials for the automators
------------------------------------------------------------------------

-- ssh_auth builds Coopr's ssh-auth for a host: {user, password} or
-- {user, identityfile}. The identity file must be a path loomd's SSH
-- binding accepts from another plugin's work dir, so it is absolute and
-- inside the work-dir root.
function StaticProvider:ssh_auth(host, fields)
  local auth = { user = host.user or self.task.config.sshuser or "root" }
  local key = host.key
  local key_file = host.key_file
  local password = host.password
  if not (key or key_file or password) then
    key, password = fields.ssh_key, fields.ssh_password
    if key == "" then key = nil end
    if password == "" then password = nil end
  end
  if key then
    local file = KEY_DIR .. "/" .. safe_name(host.id) .. ".pem"
    fs.write(file, key, { mode = "0600" })
    auth.identityfile = self.env.work_dir .. "/" .. file
  elseif key_file then
    -- check_credentials made sure it exists when the host was claimed.
    auth.identityfile = key_file:sub(1, 1) == "/" and key_file or (self.env.work_dir .. "/" .. key_file)
  else
    auth.password = password
  end
  -- Loom addition: sshd on another port. The shell automator reads it.
  if host.port ~= 22 then auth.port = host.port end
  return auth
end

------------------------------------------------------------------------
-- Hooks
------------------------------------------------------------------------

function StaticProvider:create(input)
  local inv, path = self:load_inventory(input.fields)
  local node = self:node_key()
  local want = labels_from(input.fields.labels)
  if input.flavor ~= nil and input.flavor ~= "" then want.flavor = tostring(input.flavor) end
  if input.image ~= nil and input.image ~= "" then want.image = tostring(input.image) end

  local by_id = {}
  for _, h in ipairs(inv.hosts) do by_id[h.id] = h end

  local id, reused, stats = with_claims(function(claims)
    -- Idempotence first: a node that already holds a host keeps it.
    for hid, c in pairs(claims) do
      if c.node_id == node then return false, hid, true end
    end
    local st = { total = #inv.hosts, matching = 0, holders = {} }
    for _, h in ipairs(inv.hosts) do
      if matches(h, want) then
        st.matching = st.matching + 1
        local c = claims[h.id]
        if c == nil then
          -- Raising here leaves claims.json as it was: nothing is claimed.
          self:check_credentials(h, input.fields, path)
          claims[h.id] = {
            node_id = node,
            task_id = self.task.taskId,
            cluster_id = self.task.clusterId,
            hostname = input.hostname,
            claimed_at = os.time(),
          }
          return true, h.id, false
        end
        st.holders[#st.holders + 1] = tostring(c.node_id)
      end
    end
    return false, nil, false, st
  end)

  if id == nil then
    local why
    if stats.matching == 0 then
      why = ("none of its %d hosts has the labels %s"):format(stats.total, describe_labels(want))
    else
      why = ("all %d hosts with the labels %s are claimed (by nodes %s)"):format(stats.matching,
        describe_labels(want), table.concat(stats.holders, ", "))
    end
    self:fail("capacity", "no free host in %s: %s; add hosts to the inventory, fix the hardware/image type's "
      .. "flavor and image, or DELETE nodes that no longer need theirs", path, why)
  end
  local host = by_id[id]
  if host == nil then
    self:fail("config", "node %s holds host %s, which is no longer in %s; DELETE the node, or put the host back",
      node, id, path)
  end
  log.info("%s host %s (%s:%d) for node %s", reused and "kept" or "claimed", id, host.address, host.port, node)
  self.result.result.providerid = id
  self.result.result["ssh-auth"] = self:ssh_auth(host, input.fields)
  self.result.status = 0
end

-- scan reads the host keys, retrying until the wait runs out: a host may
-- be booting, and CONFIRM is where Coopr waited for sshd.
function StaticProvider:scan(host, fields)
  local wait = tonumber(fields.confirm_wait) or 60
  local per_try = tonumber(fields.ssh_timeout) or 10
  local remaining = time.remaining()
  if remaining ~= nil and remaining - 1 < wait then wait = math.max(0, remaining - 1) end
  local deadline = time.now() + wait
  local last
  repeat
    local ok, keys = pcall(ssh.keyscan, { host = host.address, port = host.port, timeout = per_try })
    if ok then return keys end
    last = type(keys) == "table" and keys.message or tostring(keys)
    if time.now() + 1 >= deadline then break end
    time.sleep(1)
  until false
  self:fail("connect", "sshd on %s:%d (host %s) did not answer within %ds: %s; check that the host is up and the "
    .. "inventory's address and port", host.address, host.port, host.id, wait, tostring(last))
end

function StaticProvider:confirm(input)
  local inv, path = self:load_inventory(input.fields)
  local id = input.providerid
  local host
  for _, h in ipairs(inv.hosts) do
    if h.id == id then host = h end
  end
  if host == nil then
    self:fail("config", "providerid %s is not a host of %s; was CREATE run with this inventory?", tostring(id), path)
  end
  local node = self:node_key()
  local claim = with_claims(function(claims) return false, claims[id] end)
  if claim == nil or claim.node_id ~= node then
    self:fail("config", "host %s is %s, not by node %s; run CREATE for this node first", id,
      claim and ("claimed by node " .. tostring(claim.node_id)) or "not claimed", node)
  end

  local seen = self:scan(host, input.fields)
  local keys = seen
  if host.host_keys ~= nil and next(host.host_keys) ~= nil then
    -- The inventory vouches for these keys: record them, and refuse a host
    -- that shows another key of the same type (a reinstalled machine, or
    -- someone else answering on that address).
    local agreed = false
    for typ, blob in pairs(host.host_keys) do
      if seen[typ] ~= nil and seen[typ] ~= blob then
        self:fail("host_key", "host %s (%s:%d) presents a %s host key that is not the one pinned in %s; "
          .. "update host_keys in the inventory if the host was reinstalled", id, host.address, host.port, typ, path)
      end
      if seen[typ] == blob then agreed = true end
    end
    if not agreed then
      self:fail("host_key", "host %s (%s:%d) presents none of the key types pinned in %s", id, host.address,
        host.port, path)
    end
    keys = host.host_keys
  end

  self.result.result.ssh_host_keys = keys
  self.result.ipaddresses = { access_v4 = host.address, bind_v4 = host.bind_address or host.address }
  self.result.hostname = host.hostname or self.task.config.hostname
  log.info("host %s (%s:%d) answers SSH; recorded %s host keys", id, host.address, host.port,
    host.host_keys and "the inventory's" or "its")
  self.result.status = 0
end

-- claim_of finds the host a node holds, for a DELETE without providerid:
-- a CREATE that claimed a host and then failed, or whose result was lost
-- (the process died), left a claim no providerid names. The claim records
-- the node and cluster that made it, which is the provider's own lookup.
local function claim_of(node, cluster)
  return with_claims(function(claims)
    for hid, c in pairs(claims) do
      if c.node_id == node and (cluster == nil or c.cluster_id == nil or c.cluster_id == cluster) then
        return false, hid
      end
    end
    return false, nil
  end)
end

function StaticProvider:delete(input)
  local id = input.providerid
  local node = self.task.nodeId
  if (id == nil or id == "") and node ~= nil and node ~= "" then
    id = claim_of(node, self.task.clusterId)
    if id ~= nil then
      log.info("no providerid: node %s holds host %s (its claim): releasing it", node, id)
    end
  end
  if id == nil or id == "" then
    -- A CREATE that never claimed anything; Coopr still sends DELETE.
    log.info("no providerid, and node %s holds no host: nothing to release", tostring(node))
    self.result.status = 0
    return
  end
  local released, holder = with_claims(function(claims)
    local c = claims[id]
    if c == nil then return false, false end
    -- A DELETE re-run after the host went to another node must not take
    -- it away from that node.
    if node ~= nil and c.node_id ~= node then return false, false, c.node_id end
    claims[id] = nil
    return true, true
  end)
  if holder ~= nil then
    log.warn("host %s now belongs to node %s, not %s: left claimed", id, tostring(holder), tostring(node))
  elseif released then
    fs.remove(KEY_DIR .. "/" .. safe_name(id) .. ".pem")
    log.info("released host %s", id)
  else
    log.info("host %s was not claimed: nothing to release", id)
  end
  self.result.status = 0
end
