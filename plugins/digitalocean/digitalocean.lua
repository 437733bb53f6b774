-- DigitalOcean provider: droplets through the DigitalOcean API v2.
--
--   create(input)   makes (or finds again) the node's droplet
--   confirm(input)  waits until it is active, reports its addresses and
--                   records its SSH host keys
--   delete(input)   destroys it
--
-- Every droplet carries the tags "loom", "coopr-cluster-<clusterId>" and
-- "coopr-node-<nodeId>". The node tag is what makes CREATE idempotent: a
-- CREATE that runs again (a retry, a crash after the API call) finds the
-- droplet it made before instead of paying for a second one.
--
-- Failures raise an error table {kind, message, ...}. On CREATE, a
-- credential failure sets Coopr's "nothing was created" status (201 for a
-- token DigitalOcean rejects, 202 for a token without the needed scope),
-- so a Coopr server marks the cluster TERMINATED instead of INCOMPLETE.

local loom = require("loom")
local fs = require("loom.fs")
local api = require("lib.api")

-- loom.time (sleep within the hook's deadline) is what lets CONFIRM poll.
-- A host without it can still CREATE and DELETE; a CONFIRM that has to
-- wait says what is missing instead of spinning the CPU.
local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

DigitalOcean = loom.Provider:extend("DigitalOcean")

-- How often CONFIRM asks whether the create action failed, in seconds:
-- only a slow droplet needs the question, and each one costs a request.
local ACTION_CHECK_EVERY = 30

-- How many times CREATE sends the droplet POST when DigitalOcean answers
-- 5xx, or the connection drops (429s are waited out by lib/api.lua).
local CREATE_ATTEMPTS = 5

-- Helpers ----------------------------------------------------------------

-- fail ends the hook with status (1 unless told) and an error table.
local function fail(self, err, status)
  if type(err) ~= "table" then
    err = { kind = "digitalocean", message = tostring(err) }
  end
  self.result.status = status or 1
  error(err, 0)
end

-- Coopr hands field values over as strings ("true", "5"); definition
-- defaults arrive as JSON booleans and numbers. Accept both.
local function truthy(v, default)
  if v == nil or v == "" then return default end
  if type(v) == "boolean" then return v end
  local s = tostring(v):lower()
  return s == "true" or s == "1" or s == "yes" or s == "on"
end

local function split_list(s)
  local out = {}
  for item in tostring(s or ""):gmatch("[^,]+") do
    item = item:match("^%s*(.-)%s*$")
    if item ~= "" then out[#out + 1] = item end
  end
  return out
end

-- DigitalOcean tags allow letters, digits, ':', '-' and '_', up to 255.
local function tag(s)
  return (tostring(s):gsub("[^%w:_%-]", "-"):sub(1, 255))
end

-- Droplet names allow letters, digits, '.' and '-', and must start and end
-- with a letter or digit. A FQDN passes unchanged, and DigitalOcean sets
-- the droplet's hostname from it.
local function droplet_name(hostname)
  local name = tostring(hostname):gsub("[^%w%.%-]", "-"):sub(1, 255)
  return (name:gsub("^[^%w]+", ""):gsub("[^%w]+$", ""))
end

-- The node tag: the droplet's identity for idempotency and for cleanup.
local function node_tag(task)
  return tag("coopr-node-" .. tostring(task.nodeId or task.taskId))
end

-- Droplet ids are integers; Coopr's providerid is a string. %d keeps
-- large ids exact where tostring might print an exponent.
local function id_string(id)
  return ("%d"):format(id)
end

-- A providerid goes into a URL path: it must be a droplet id and nothing
-- else (no "../account").
local function droplet_id(self, providerid)
  local id = tostring(providerid or "")
  if not id:match("^%d+$") then
    fail(self, ("providerid %q is not a DigitalOcean droplet id; was CREATE run by this provider?"):format(id))
  end
  return id
end

local function client(fields)
  return api.new({ url = fields.api_url, token = fields.api_token, timeout = fields.api_timeout })
end

-- remaining is the time left before the hook deadline, minus the margin
-- kept for the last API call and a clear error.
local remaining = api.remaining

-- pause waits `seconds`, or fails with `why` when that would overrun the
-- hook deadline (or when this loomd has no loom.time to wait with).
local function pause(self, seconds, why)
  if not time then
    fail(self, why .. "; waiting needs the loom.time module, which this loomd does not provide")
  end
  if seconds > remaining() then
    fail(self, why .. (" and the hook deadline leaves no time to wait %.1fs more (raise timeouts.%s in digitalocean.json)")
      :format(seconds, self.env.hook))
  end
  time.sleep(seconds)
end

-- CREATE -----------------------------------------------------------------

-- On CREATE, DigitalOcean refusing the token means nothing was created:
-- 201 for an invalid token (401), 202 for one without write scope (403).
local function credential_status(http_status)
  if http_status == 401 then return 201 end
  if http_status == 403 then return 202 end
  return 1
end

local function has_tag(d, t)
  for _, x in ipairs(type(d.tags) == "table" and d.tags or {}) do
    if x == t then return true end
  end
  return false
end

-- find_droplet returns the droplet tagged for this node, if any. Listings
-- leave GPU droplets out unless asked with type=gpus, which DigitalOcean
-- does not combine with tag_name: GPU droplets are looked up by the name
-- CREATE gives them (an exact, case-insensitive match) and kept only when
-- they carry the node tag.
local function find_droplet(self, do_api, node, name)
  local function lookup(query, what)
    local ok, found = pcall(do_api.list, do_api, "/droplets", "droplets", query, what)
    if not ok then
      fail(self, found, type(found) == "table" and credential_status(found.http_status) or 1)
    end
    return found
  end
  local found = lookup({ tag_name = node }, "looking for a droplet tagged " .. node)
  if name and name ~= "" then
    for _, d in ipairs(lookup({ type = "gpus", name = name }, ("looking for a GPU droplet named %s tagged %s"):format(name, node))) do
      if has_tag(d, node) then found[#found + 1] = d end
    end
  end
  local live, seen = {}, {}
  for _, d in ipairs(found) do
    -- An archived droplet is on its way out; never hand it back.
    if d.status ~= "archive" and not seen[d.id] then
      seen[d.id] = true
      live[#live + 1] = d
    end
  end
  if #live > 1 then
    -- Two droplets for one node: a concurrent CREATE raced this one. Keep
    -- the oldest (lowest id) so every retry settles on the same one.
    table.sort(live, function(a, b) return a.id < b.id end)
    local others = {}
    for i = 2, #live do others[#others + 1] = id_string(live[i].id) end
    log.warn("%d droplets carry the tag %s; using %s, delete the others: %s",
      #live, node, id_string(live[1].id), table.concat(others, ", "))
  end
  return live[1]
end

local function find_key(keys, w)
  for _, k in ipairs(keys) do
    if k.name == w or (type(k.fingerprint) == "string" and k.fingerprint:lower() == w:lower())
      or (tonumber(k.id) and id_string(k.id) == w) then
      return k
    end
  end
  return nil
end

-- resolve_keys maps the ssh_keys field (names, MD5 fingerprints or ids of
-- keys in the account) to fingerprints, which the create call accepts. The
-- account's key listing is cached (lib/api.lua: GET /v2/account/keys
-- allows 10 requests a minute); the second result says where it came from.
local function resolve_keys(self, do_api, wanted)
  if #wanted == 0 then return {}, "none" end
  local function has_all(keys)
    for _, w in ipairs(wanted) do
      if not find_key(keys, w) then return false end
    end
    return true
  end
  local ok, keys, from = pcall(do_api.account_keys, do_api, has_all)
  if not ok then
    fail(self, keys, type(keys) == "table" and credential_status(keys.http_status) or 1)
  end
  local out, names = {}, {}
  for _, w in ipairs(wanted) do
    local hit = find_key(keys, w)
    if not hit then
      for _, k in ipairs(keys) do names[#names + 1] = ("%s (%s)"):format(tostring(k.name), tostring(k.fingerprint)) end
      fail(self, ("no SSH key %q in the DigitalOcean account (field ssh_keys); the account has: %s")
        :format(w, #names > 0 and table.concat(names, ", ") or "no keys"))
    end
    out[#out + 1] = hit.fingerprint
  end
  return out, from
end

-- post_droplet creates the droplet, or returns nil and the error of a
-- refused request. 429s are waited out by lib/api.lua, within the hook
-- deadline. A 5xx or a lost connection is ambiguous (the droplet may
-- exist), so the node tag is checked before trying again: a retry must
-- never make a second droplet.
local function post_droplet(self, do_api, body, node)
  local what = "creating droplet " .. body.name
  for attempt = 1, CREATE_ATTEMPTS do
    local ok, resp = pcall(do_api.request, do_api, "POST", "/droplets", { json = body })
    if ok and resp.status == 202 then
      return resp:json().droplet
    end
    if ok and resp.status == 429 then
      -- lib/api.lua waited out 429s as long as the deadline allowed.
      fail(self, do_api:api_error(resp, what))
    elseif not ok or resp.status >= 500 then
      local why = ok and do_api:api_error(resp, what) or resp
      if not ok and (type(resp) ~= "table" or (resp.kind ~= "connect" and resp.kind ~= "timeout")) then
        fail(self, resp) -- permission, config, a bug: retrying cannot help
      end
      local d = find_droplet(self, do_api, node, body.name)
      if d then
        log.info("%s failed (%s), but droplet %s exists: using it", what, tostring(why.message), id_string(d.id))
        return d
      end
      if attempt == CREATE_ATTEMPTS then fail(self, why) end
      local wait = ok and tonumber(resp.headers["retry-after"]) or 2 ^ attempt
      log.warn("%s; retrying in %ds", tostring(why.message), wait)
      pause(self, wait, tostring(why.message))
    else
      local err = do_api:api_error(resp, what)
      return nil, err
    end
  end
end

function DigitalOcean:create(input)
  local f = input.fields
  if input.flavor == nil or input.image == nil or input.hostname == nil then
    fail(self, "CREATE needs config.flavor (a droplet size slug), config.image (an image slug or id) and config.hostname")
  end
  local do_api = client(f)
  local node = node_tag(self.task)

  local name = droplet_name(input.hostname)
  local droplet = find_droplet(self, do_api, node, name)
  if droplet then
    log.info("droplet %s (%s) already exists for this node (tag %s): reusing it",
      id_string(droplet.id), tostring(droplet.name), node)
  else
    local tags = { "loom", tag("coopr-cluster-" .. tostring(self.task.clusterId)), node }
    for _, t in ipairs(split_list(f.tags)) do tags[#tags + 1] = tag(t) end
    -- Image ids are numbers in the API; slugs ("debian-12-x64") strings.
    local image = tostring(input.image)
    local body = {
      name = name,
      region = f.region,
      size = input.flavor,
      image = image:match("^%d+$") and tonumber(image) or image,
      tags = tags,
      ipv6 = truthy(f.ipv6, false),
      monitoring = truthy(f.monitoring, false),
      backups = truthy(f.backups, false),
    }
    local wanted = split_list(f.ssh_keys)
    local keys, keys_from = resolve_keys(self, do_api, wanted)
    if #keys > 0 then
      body.ssh_keys = keys
    else
      log.warn("no ssh_keys: DigitalOcean will email a root password, and automators cannot log in with a key")
    end
    if f.vpc_uuid and f.vpc_uuid ~= "" then body.vpc_uuid = f.vpc_uuid end
    if f.user_data and f.user_data ~= "" then body.user_data = f.user_data end
    log.info("creating droplet %s: size %s, image %s, region %s", body.name, body.size, image, tostring(body.region))
    local err
    droplet, err = post_droplet(self, do_api, body, node)
    if not droplet and err.http_status == 422 and (keys_from == "vm" or keys_from == "shared") then
      -- The cached key listing may be stale (a key deleted or replaced
      -- since): list again, and post again if the fingerprints changed.
      do_api:forget_keys()
      local again = resolve_keys(self, do_api, wanted)
      if table.concat(again, ",") ~= table.concat(keys, ",") then
        log.info("%s; the account's SSH keys changed since they were cached: posting again", err.message)
        body.ssh_keys = again
        droplet, err = post_droplet(self, do_api, body, node)
      end
    end
    if not droplet then
      fail(self, err, credential_status(err.http_status))
    end
    log.info("created droplet %s (%s)", id_string(droplet.id), tostring(droplet.name))
  end

  self.result.result.providerid = id_string(droplet.id)
  self.result.result["ssh-auth"].user = self.task.config.sshuser or "root"
  local key = f.ssh_key_resource
  if key ~= nil and key ~= "" then
    if key:find("/", 1, true) or key == ".." then
      fail(self, ("ssh_key_resource %q must be a file name in the ssh_keys resource, not a path"):format(key))
    end
    local rel = "ssh_keys/" .. key
    if not fs.exists(rel) then
      log.warn("the private key %s is not in the work dir yet; automators will need it", rel)
    end
    self.result.result["ssh-auth"].identityfile = self.env.work_dir .. "/" .. rel
  end
  self.result.status = 0
end

-- CONFIRM ----------------------------------------------------------------

-- ipv4 returns the droplet's first public and private IPv4 addresses.
local function ipv4(droplet)
  local public, private
  local nets = droplet.networks and droplet.networks.v4 or {}
  for _, n in ipairs(nets) do
    if n.type == "public" and public == nil then public = n.ip_address end
    if n.type == "private" and private == nil then private = n.ip_address end
  end
  return public, private
end

-- create_failed reports whether the droplet's create action errored: such
-- a droplet stays "new" forever, so waiting out the deadline is pointless.
local function create_failed(do_api, id)
  local resp = do_api:request("GET", "/droplets/" .. id .. "/actions", { retries = 4, query = { per_page = 50 } })
  if not resp.ok then
    log.debug("could not read the actions of droplet %s: HTTP %d", id, resp.status)
    return nil
  end
  for _, a in ipairs((resp:json() or {}).actions or {}) do
    if a.type == "create" and a.status == "errored" then
      return a
    end
  end
  return nil
end

local function wait_active(self, do_api, id, interval)
  local last_status, last_action_check = nil, nil
  local what = "reading droplet " .. id
  while true do
    local resp = do_api:request("GET", "/droplets/" .. id, { retries = 4 })
    if resp.status == 404 then
      fail(self, ("droplet %s does not exist (destroyed outside Loom?)"):format(id))
    elseif not resp.ok then
      fail(self, do_api:api_error(resp, what))
    end
    local d = resp:json().droplet
    if d.status ~= last_status then
      log.info("droplet %s is %s", id, tostring(d.status))
      last_status = d.status
    end
    local public, private = ipv4(d)
    if d.status == "active" and (public or private) then
      return d
    elseif d.status == "off" or d.status == "archive" then
      fail(self, ("droplet %s is %s, not starting: power it on or delete it"):format(id, d.status))
    end
    local now = os.time()
    if d.status == "new" and (last_action_check == nil or now - last_action_check >= ACTION_CHECK_EVERY) then
      last_action_check = now
      local a = create_failed(do_api, id)
      if a then
        fail(self, ("DigitalOcean reports that creating droplet %s failed (action %s errored)"):format(id, id_string(a.id)))
      end
    end
    pause(self, interval, ("droplet %s is still %s"):format(id, tostring(d.status)))
  end
end

-- record_host_keys waits for sshd on host (loom.ssh's wait_host_keys,
-- within ssh_wait and the hook's deadline) and records its host keys for
-- the automators to pin: Coopr's ssh_host_keys, {ed25519=, ecdsa=, rsa=}
-- base64. Without loom.ssh, or if sshd never answers, CONFIRM still
-- succeeds, with a warning, and BOOTSTRAP will meet an unpinned host.
local function record_host_keys(self, host, f, interval)
  local have_ssh, ssh = pcall(require, "loom.ssh")
  if not have_ssh then
    log.warn("loom.ssh is not available: not waiting for sshd on %s and not recording ssh_host_keys", host)
    return
  end
  local port = tonumber(f.ssh_port) or 22
  local budget = math.max(tonumber(f.ssh_wait) or 300, 0)
  local keys, err = ssh.wait_host_keys({ host = host, port = port, timeout = budget, interval = interval })
  if keys then
    self.result.result.ssh_host_keys = keys
    log.info("recorded the SSH host keys of %s:%d", host, port)
  else
    log.warn("no SSH host keys: %s; CONFIRM succeeds without ssh_host_keys", tostring(err))
  end
end

function DigitalOcean:confirm(input)
  local f = input.fields
  local id = droplet_id(self, input.providerid)
  local do_api = client(f)
  -- A zero interval would turn polling into a request storm against the quota.
  local interval = tonumber(f.poll_interval) or 0
  if interval <= 0 then interval = 5 end

  local d = wait_active(self, do_api, id, interval)
  local public, private = ipv4(d)
  -- access_v4 is what automators SSH to; bind_v4 what services listen on.
  self.result.ipaddresses = { access_v4 = public or private, bind_v4 = private or public }
  self.result.hostname = d.name
  log.info("droplet %s is active at %s (private %s)", id, tostring(public), tostring(private))

  if truthy(f.wait_for_ssh, true) then
    record_host_keys(self, public or private, f, interval)
  end
  self.result.status = 0
end

-- DELETE -----------------------------------------------------------------

-- delete_gpu_droplets deletes the GPU droplets named for the node and
-- tagged for it: whether a delete by tag reaches GPU droplets is not
-- documented, and listings leave them out unless asked (type=gpus).
-- Failures are warnings, as for the delete by tag.
local function delete_gpu_droplets(do_api, node, hostname)
  if hostname == nil or hostname == "" then return end
  local name = droplet_name(hostname)
  local ok, found = pcall(do_api.list, do_api, "/droplets", "droplets", { type = "gpus", name = name },
    "looking for a GPU droplet named " .. name)
  if not ok then
    log.warn("no providerid, and looking for GPU droplets named %s failed: %s", name,
      type(found) == "table" and tostring(found.message) or tostring(found))
    return
  end
  for _, d in ipairs(found) do
    if has_tag(d, node) then
      local id = id_string(d.id)
      local dok, resp = pcall(do_api.request, do_api, "DELETE", "/droplets/" .. id, { retries = 4 })
      if dok and (resp.status == 204 or resp.status == 404) then
        log.info("no providerid: deleted GPU droplet %s tagged %s", id, node)
      else
        local err = dok and do_api:api_error(resp, "deleting GPU droplet " .. id) or resp
        log.warn("no providerid, and deleting GPU droplet %s failed: %s", id, tostring(err.message))
      end
    end
  end
end

function DigitalOcean:delete(input)
  local do_api = client(input.fields)
  local providerid = input.providerid
  if providerid == nil or providerid == "" then
    -- CREATE may have made a droplet and died before reporting its id.
    -- The node tag still finds it; deleting by tag is a no-op otherwise.
    local node = node_tag(self.task)
    local ok, resp = pcall(do_api.request, do_api, "DELETE", "/droplets", { query = { tag_name = node }, retries = 4 })
    if ok and (resp.status == 204 or resp.status == 404) then
      log.info("no providerid: deleted any droplet tagged %s", node)
    else
      -- Coopr skipped a DELETE without providerid; failing it here would
      -- block the cluster's teardown over a droplet that most likely
      -- never existed.
      local err = ok and do_api:api_error(resp, "deleting droplets tagged " .. node) or resp
      log.warn("no providerid, and deleting by tag failed: %s", tostring(err.message))
    end
    delete_gpu_droplets(do_api, node, self.task.config.hostname)
    self.result.status = 0
    return
  end

  local id = droplet_id(self, providerid)
  local resp = do_api:request("DELETE", "/droplets/" .. id, { retries = 4 })
  if resp.status == 204 then
    log.info("deleted droplet %s", id)
  elseif resp.status == 404 then
    log.info("droplet %s was already gone", id)
  else
    fail(self, do_api:api_error(resp, "deleting droplet " .. id))
  end
  self.result.status = 0
end
