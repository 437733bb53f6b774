-- Joyent provider: machines on Triton's CloudAPI (Joyent's public cloud and
-- every Triton DataCenter), the Loom port of Coopr's FogProviderJoyent.
--
--   create(input)   makes (or finds again) the node's machine
--   confirm(input)  waits until it is running, reports its addresses and
--                   records its SSH host keys
--   delete(input)   deletes it
--
-- Every machine carries the tags loom_node=<nodeId> and
-- loom_cluster=<clusterId>: CREATE looks the node's machine up by its tag
-- before it makes one, and again after any failure that leaves it unknown
-- whether CloudAPI made it, so a retried CREATE never pays for a second
-- machine; a DELETE without a providerid finds it by the same tag.
--
-- Coopr's fields keep their meaning (api_user, api_password, ssh_keypair,
-- ssh_key_resource, joyent_api_url, joyent_version), so Coopr's
-- fog_provider.json loads with this file unchanged (FogProviderJoyent
-- below). Failures raise an error table {kind, message, ...}; on CREATE a
-- credential failure sets Coopr's "nothing was created" status: 201 when
-- CloudAPI refuses the credentials, 202 when it forbids the request or
-- answers 409 (Coopr's Conflict).

local loom = require("loom")
local cloudapi = require("lib.cloudapi")

Joyent = loom.Provider:extend("Joyent")

local str = cloudapi.str

-- How many times CREATE posts the machine when CloudAPI answers 5xx or the
-- answer is lost (looking for the node's machine before each new try).
local CREATE_ATTEMPTS = 3

-- Machine states CONFIRM waits through; "running" is ready, anything else
-- (failed, deleted, stopped...) fails it.
local WAITING = { provisioning = true, ready = true, offline = true }

-- States of a machine that is gone or never came: not the node's machine.
local GONE = { deleted = true, failed = true }

local function fail(self, err, status)
  if type(err) ~= "table" then
    err = { kind = "joyent", message = tostring(err) }
  end
  self.result.status = status or 1
  error(err, 0)
end

-- credential_status is Coopr's "nothing was created" code for a CREATE
-- that failed before any machine existed.
local function credential_status(err)
  if type(err) ~= "table" then return 1 end
  if err.http_status == 401 then return 201 end
  if err.http_status == 403 or err.http_status == 409 then return 202 end
  return 1
end

local function truthy(v, default)
  if v == nil or v == "" then return default end
  return v == true or v == "true" or v == "1" or v == 1
end

local function node_id(task)
  return tostring(task.nodeId or task.taskId)
end

local function machine_id(self, providerid)
  local id = tostring(providerid or "")
  if not id:match("^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$") then
    fail(self, ("providerid %q is not a CloudAPI machine id (a UUID); was CREATE run by this provider?"):format(id))
  end
  return id
end

local function connect(self, f, status)
  local ok, api = pcall(cloudapi.new, f)
  if not ok then fail(self, api, status) end
  return api
end

-- call runs api:request and turns a raised error into fail() with the
-- status the caller needs.
local function call(self, api, method, path, opts, status_of_err)
  local ok, resp = pcall(api.request, api, method, path, opts)
  if not ok then
    fail(self, resp, status_of_err and status_of_err(resp) or 1)
  end
  return resp
end

-- machines_of lists the node's machines by its tag (CloudAPI filters on
-- tag.<name>), live ones only, oldest first.
local function machines_of(self, api, node, status_of_err)
  local what = "looking for the machine of node " .. node
  local resp = call(self, api, "GET", "/machines", { query = { ["tag.loom_node"] = node }, retries = 4, what = what }, status_of_err)
  if not resp.ok then
    local err = api:api_error(resp, what)
    fail(self, err, status_of_err and status_of_err(err) or 1)
  end
  local out = {}
  for _, m in ipairs(resp:json() or {}) do
    if type(m) == "table" and type(m.tags) == "table" and m.tags.loom_node == node and not GONE[m.state] then
      out[#out + 1] = m
    end
  end
  table.sort(out, function(a, b)
    if a.created ~= b.created then return tostring(a.created) < tostring(b.created) end
    return tostring(a.id) < tostring(b.id)
  end)
  return out
end

local function split_list(s)
  local out = {}
  for item in str(s):gmatch("[^,%s]+") do out[#out + 1] = item end
  return out
end

-- CREATE -------------------------------------------------------------------

function Joyent:create(input)
  local f = input.fields
  if input.flavor == nil or input.image == nil or input.hostname == nil then
    fail(self, "CREATE needs config.flavor (a package name or id), config.image (an image id) and config.hostname")
  end
  local api = connect(self, f, 201)
  local node = node_id(self.task)
  local name = tostring(input.hostname)

  local machine = machines_of(self, api, node, credential_status)
  local found = machine[1]
  if found then
    if #machine > 1 then
      local others = {}
      for i = 2, #machine do others[#others + 1] = tostring(machine[i].id) end
      log.warn("%d machines carry the tag loom_node=%s; using %s, delete the others: %s", #machine, node,
        tostring(found.id), table.concat(others, ", "))
    end
    log.info("machine %s (%s) already exists for node %s: reusing it", tostring(found.id), tostring(found.state), node)
  else
    local body = {
      name = name,
      package = tostring(input.flavor),
      image = tostring(input.image),
      ["tag.loom_node"] = node,
      ["tag.loom_cluster"] = tostring(self.task.clusterId or ""),
    }
    local nets = split_list(f.network_ids)
    if #nets > 0 then body.networks = nets end
    log.info("creating machine %s: package %s, image %s", name, body.package, body.image)
    local what = "creating machine " .. name
    for attempt = 1, CREATE_ATTEMPTS do
      local ok, resp = pcall(api.request, api, "POST", "/machines", { json = body, what = what })
      if ok and resp.status == 201 then
        found = resp:json()
        break
      end
      if ok and resp.status < 500 then
        local err = api:api_error(resp, what)
        if resp.status == 409 then
          err.message = err.message .. "; CloudAPI refused the machine as it is (a name in use, a package or image the account cannot use)"
        end
        fail(self, err, credential_status(err))
      end
      -- A 5xx or a lost answer: the machine may exist. Look before posting again.
      local why = ok and api:api_error(resp, what).message or (type(resp) == "table" and tostring(resp.message) or tostring(resp))
      local again = machines_of(self, api, node, credential_status)
      if again[1] then
        found = again[1]
        log.info("%s failed (%s), but machine %s of node %s exists: using it", what, why, tostring(found.id), node)
        break
      end
      if attempt == CREATE_ATTEMPTS then
        fail(self, { kind = "joyent", message = ("%s: %s (tried %d times)"):format(what, why, attempt), http_status = ok and resp.status or nil })
      end
      log.warn("%s: %s; trying again", what, why)
      cloudapi.sleep(math.min(2 ^ (attempt - 1), 10), what)
    end
    log.info("created machine %s (%s)", tostring(found.id), name)
  end

  self.result.result.providerid = tostring(found.id)
  local auth = self.result.result["ssh-auth"]
  auth.user = self.task.config.sshuser or "root"
  local key = str(f.ssh_key_resource)
  if key ~= "" then
    auth.identityfile = self.env.work_dir .. "/ssh_keys/" .. key
  end
  self.result.status = 0
end

-- CONFIRM ------------------------------------------------------------------

local function private_v4(ip)
  local a, b = ip:match("^(%d+)%.(%d+)%.")
  a, b = tonumber(a), tonumber(b)
  if not a then return false end
  return a == 10 or (a == 172 and b >= 16 and b <= 31) or (a == 192 and b == 168) or (a == 100 and b >= 64 and b <= 127)
end

-- addresses picks the access and bind addresses among the machine's IPv4
-- addresses, as Coopr did: loopback and link-local never; a lone address
-- is both; otherwise the first public one is the access address, and a
-- private one (when there is one) the bind address.
local function addresses(m)
  local v4 = {}
  local primary = type(m.primaryIp) == "string" and m.primaryIp or nil
  for _, ip in ipairs(type(m.ips) == "table" and m.ips or {}) do
    if type(ip) == "string" and ip:match("^%d+%.%d+%.%d+%.%d+$") and not ip:match("^127%.") and not ip:match("^169%.254%.") then
      v4[#v4 + 1] = ip
    end
  end
  if #v4 == 0 then return nil, nil end
  if #v4 == 1 then return v4[1], v4[1] end
  local public, private
  if primary and not private_v4(primary) then public = primary end
  for _, ip in ipairs(v4) do
    if not public and not private_v4(ip) then public = ip end
    if not private and private_v4(ip) then private = ip end
  end
  return public or private, private or public
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

function Joyent:confirm(input)
  local f = input.fields
  local id = machine_id(self, input.providerid)
  local api = connect(self, f)
  local interval = tonumber(f.poll_interval) or 0
  if interval <= 0 then interval = 5 end
  local what = "reading machine " .. id
  local m
  while true do
    local resp = call(self, api, "GET", "/machines/" .. id, { retries = 4, what = what })
    if resp.status == 404 or resp.status == 410 then
      fail(self, api:api_error(resp, what .. " (it is gone: deleted, or CREATE's machine failed)"))
    end
    if not resp.ok then fail(self, api:api_error(resp, what)) end
    m = resp:json() or {}
    if m.state == "running" then break end
    if not WAITING[m.state] then
      fail(self, ("machine %s is %s, not running: look at it with `triton instance get %s`"):format(id, tostring(m.state), id))
    end
    cloudapi.sleep(interval, ("machine %s is still %s"):format(id, tostring(m.state)))
  end
  local access, bind = addresses(m)
  if access == nil then
    fail(self, ("machine %s is running but has no IPv4 address; check its networks (network_ids)"):format(id))
  end
  self.result.ipaddresses = { access_v4 = access, bind_v4 = bind }
  log.info("machine %s is running at %s (bind %s)", id, access, bind)
  if truthy(f.wait_for_ssh, true) then
    record_host_keys(self, access, f, interval)
  end
  self.result.status = 0
end

-- DELETE -------------------------------------------------------------------

-- delete_machine deletes machine id; gone already is done. A machine
-- CloudAPI will not delete yet (409 while it provisions) is tried again
-- every poll interval within the hook deadline.
local function delete_machine(self, api, id, interval)
  local what = "deleting machine " .. id
  while true do
    local resp = call(self, api, "DELETE", "/machines/" .. id, { retries = 4, what = what })
    if resp.status == 204 or resp.status == 200 or resp.status == 202 then
      log.info("deleted machine %s", id)
      return
    end
    if resp.status == 404 or resp.status == 410 then
      log.info("machine %s was already gone", id)
      return
    end
    if resp.status ~= 409 then
      fail(self, api:api_error(resp, what))
    end
    local err = api:api_error(resp, what)
    if interval > cloudapi.remaining() then
      err.message = err.message .. "; CloudAPI did not let the machine be deleted before the hook deadline: run DELETE again"
      fail(self, err)
    end
    log.info("%s: %s; trying again in %.0fs", what, err.message, interval)
    cloudapi.sleep(interval, what)
  end
end

function Joyent:delete(input)
  local f = input.fields
  local api = connect(self, f)
  local interval = tonumber(f.poll_interval) or 0
  if interval <= 0 then interval = 5 end
  local providerid = input.providerid
  if providerid == nil or providerid == "" then
    -- CREATE may have made a machine and died before reporting its id.
    local node = node_id(self.task)
    local found = machines_of(self, api, node)
    if #found == 0 then
      log.info("no providerid and no machine tagged loom_node=%s: nothing to delete", node)
    end
    for _, m in ipairs(found) do
      delete_machine(self, api, machine_id(self, m.id), interval)
    end
    self.result.status = 0
    return
  end
  delete_machine(self, api, machine_id(self, providerid), interval)
  self.result.status = 0
end

-- Coopr's fog_provider.json names this class for its joyent type.
FogProviderJoyent = Joyent
