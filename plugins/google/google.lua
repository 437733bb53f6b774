-- Google provider: Compute Engine instances through the Compute Engine API
-- v1, with a service account's token (lib/auth.lua: a JWT signed in
-- loom.crypto, traded at Google's token endpoint).
--
--   create(input)   inserts (or finds again) the node's instance and waits
--                   for the zone operation
--   confirm(input)  waits until it runs, reports its addresses, and records
--                   its SSH host keys from the guest attributes
--   delete(input)   deletes it and waits for the zone operation
--
-- The instance's name is the node's short hostname, as Coopr's provider
-- named it (and its providerid). Every instance carries the labels loom,
-- coopr-cluster and coopr-node: CREATE finds an instance it made before by
-- its name and checks its label, DELETE without a providerid finds it by
-- the label. An insert carries a requestId derived from the node and the
-- request, so an insert sent again (a lost answer) is the same operation,
-- not a second instance.
--
-- Failures raise an error table {kind, message, ...}; on CREATE, a service
-- account Google refuses sets Coopr's "nothing was created" status (201,
-- or 202 for one without the permission).

local loom = require("loom")
local fs = require("loom.fs")
local crypto = require("loom.crypto")
local gce = require("lib.gce")

local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

Google = loom.Provider:extend("Google")
-- Coopr's fog_provider.json names the class FogProviderGoogle: the same
-- table serves it, so that definition loads unchanged.
FogProviderGoogle = Google

-- How many deleted instances one node's requestId chain may pass (one per
-- DELETE and CREATE of the node within the hour Compute Engine remembers
-- a requestId).
local MAX_REQUEST_HOPS = 20

-- Public image projects, by the prefix of their image names, so a Coopr
-- image type naming "debian-12-bookworm-v20240110" (fog resolved these)
-- still finds its image.
local IMAGE_PROJECTS = {
  { "debian-", "debian-cloud" }, { "centos-", "centos-cloud" }, { "ubuntu-", "ubuntu-os-cloud" },
  { "rhel-", "rhel-cloud" }, { "rocky-linux-", "rocky-linux-cloud" }, { "cos-", "cos-cloud" },
  { "sles-", "suse-cloud" }, { "opensuse-", "opensuse-cloud" }, { "fedora-coreos-", "fedora-coreos-cloud" },
}

local DISK_TYPES = { standard = "pd-standard", ssd = "pd-ssd", balanced = "pd-balanced" }

-- Helpers ----------------------------------------------------------------

local function fail(self, err, status)
  if type(err) ~= "table" then
    err = { kind = "google", message = tostring(err) }
  end
  self.result.status = status or 1
  error(err, 0)
end

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

local function number(v, default)
  return tonumber(v) or default
end

local function node_id(task)
  return tostring(task.nodeId or task.taskId)
end

-- Label values hold lowercase letters, digits, _ and -, at most 63.
local function label(s)
  return (tostring(s):lower():gsub("[^%w_%-]", "_"):sub(1, 63))
end

-- instance_name is the node's short hostname as a Compute Engine name:
-- [a-z]([-a-z0-9]{0,61}[a-z0-9])?
local function instance_name(hostname)
  local short = tostring(hostname):match("^([^%.]+)") or ""
  local name = short:lower():gsub("[^%w%-]", "-")
  if not name:match("^%a") then name = "n-" .. name end
  name = name:sub(1, 63):gsub("%-+$", "")
  return name
end

local NAME = "^%l[%l%d%-]*$"

local function check_name(self, name)
  if #name > 63 or not name:match(NAME) or name:match("%-$") then
    fail(self, ("providerid %q is not a Compute Engine instance name; was CREATE run by this provider?"):format(name))
  end
  return name
end

-- Credentials ----------------------------------------------------------------

-- credentials loads the service account's key (by reference: the text
-- stays in loom.crypto) and its email.
local function credentials(self, f)
  local ok, key
  if f.google_json_key ~= nil and f.google_json_key ~= "" then
    ok, key = pcall(crypto.key, { field = "google_json_key" })
  else
    local name = tostring(f.api_key_resource or "")
    if name == "" or name:find("/", 1, true) or name == ".." then
      fail(self, ("api_key_resource %q must be the file name of a JSON key in the api_keys resource"):format(name))
    end
    ok, key = pcall(crypto.key, { resource = "api_keys/" .. name })
  end
  if not ok then fail(self, key) end
  local email = f.google_client_email
  if email == nil or email == "" then email = key.client_email end
  if email == nil or email == "" then
    fail(self, "the JSON key has no client_email: give google_client_email")
  end
  if key.client_email and key.client_email ~= email then
    log.warn("google_client_email %s is not the JSON key's client_email %s: using %s", email, key.client_email, email)
  end
  return key, email
end

local function client(self, f)
  local key, email = credentials(self, f)
  local zone = tostring(f.zone_name or "")
  if not zone:match("^%l[%l%d%-]*%-%l$") then
    fail(self, ("zone_name %q is not a Compute Engine zone such as us-central1-a"):format(zone))
  end
  return gce.new({
    project = f.google_project, zone = zone, key = key, email = email,
    -- Coopr's definition has no api_url or token_url: Google's own then.
    api_url = f.api_url ~= "" and f.api_url or nil,
    token_url = (f.token_url ~= nil and f.token_url ~= "") and f.token_url or "https://oauth2.googleapis.com/token",
    timeout = f.api_timeout, poll_interval = f.poll_interval,
  })
end

-- raise fails the hook with err; on CREATE a service account Google
-- refuses is Coopr's "nothing was created" (201; 202 for 403).
local function raise(self, err, creating)
  local status = 1
  -- An operation's error (QUOTA_EXCEEDED...) is not about the credentials.
  if creating and type(err) == "table" and err.kind == "google" and err.operation == nil then
    if err.code == "auth" or err.http_status == 401 then
      status = 201
    elseif err.http_status == 403 and err.code ~= "rateLimitExceeded" and err.code ~= "userRateLimitExceeded" then
      status = 202
    end
  end
  fail(self, err, status)
end

-- request sends a request; a transport failure or a token the endpoint
-- refused fails the hook (201 on CREATE for the latter).
local function request(self, c, method, path, opts, creating)
  local ok, resp, body = pcall(c.request, c, method, path, opts)
  if not ok then raise(self, resp, creating) end
  return resp, body
end

local function get_instance(self, c, name, creating)
  local resp, body = request(self, c, "GET", "/zones/" .. c.zone .. "/instances/" .. name, nil, creating)
  if resp.status == 404 then return nil end
  if resp.status ~= 200 then
    raise(self, c:error(resp, body, ("reading instance %s in %s"):format(name, c.zone)), creating)
  end
  return body
end

local function wait_op(self, c, op, what, creating)
  local ok, res = pcall(c.wait, c, op, what)
  if not ok then raise(self, res, creating) end
  return res
end

-- UUID-shaped digest (RFC 4122 version 5 layout) of s: a requestId.
local function uuid(s)
  local h = crypto.sha256(s)
  local variant = ("89ab"):sub(tonumber(h:sub(17, 17), 16) % 4 + 1, tonumber(h:sub(17, 17), 16) % 4 + 1)
  return ("%s-%s-5%s-%s%s-%s"):format(h:sub(1, 8), h:sub(9, 12), h:sub(14, 16), variant, h:sub(18, 20), h:sub(21, 32))
end

-- CREATE -----------------------------------------------------------------

local function source_image(project, image)
  image = tostring(image)
  if image:find("/", 1, true) then return image end
  for _, p in ipairs(IMAGE_PROJECTS) do
    if image:sub(1, #p[1]) == p[1] then
      if image:match("%-v%d%d%d%d%d%d%d%d") then
        return ("projects/%s/global/images/%s"):format(p[2], image)
      end
      return ("projects/%s/global/images/family/%s"):format(p[2], image)
    end
  end
  return "global/images/" .. image
end

local function disk_type(zone, t)
  t = tostring(t or "standard")
  return ("zones/%s/diskTypes/%s"):format(zone, DISK_TYPES[t] or t)
end

local function labels(self, f)
  local out = { loom = "true", ["coopr-cluster"] = label(self.task.clusterId or ""), ["coopr-node"] = label(node_id(self.task)) }
  for _, kv in ipairs(split_list(f.labels)) do
    local k, v = kv:match("^([^=]+)=(.*)$")
    if not k then fail(self, ("labels: %q is not key=value"):format(kv)) end
    k = k:match("^%s*(.-)%s*$")
    if out[k] then fail(self, ("labels: %q is set by the provider and cannot be given"):format(k)) end
    if not k:match("^%l[%l%d_%-]*$") or #k > 63 then
      fail(self, ("labels: key %q must start with a lowercase letter and hold lowercase letters, digits, _ and -"):format(k))
    end
    out[k] = label(v)
  end
  return out
end

-- ssh_user is who the automators log in as: ssh_user, the image type's
-- sshuser, else "loom" (Google's images refuse root logins).
local function ssh_user(self, f)
  if f.ssh_user ~= nil and f.ssh_user ~= "" then return f.ssh_user end
  local u = self.task.config.sshuser
  if u ~= nil and u ~= "" then return u end
  return "loom"
end

-- login_key returns the public key to install and the private key's file:
-- the ssh_key_resource's, or the node's generated key
-- (ssh_keys/loom-<node>), made when generate is set and it is missing.
local function login_key(self, f, node, generate)
  local res = f.ssh_key_resource
  if res ~= nil and res ~= "" then
    if res:find("/", 1, true) or res == ".." then
      fail(self, ("ssh_key_resource %q must be a file name in the ssh_keys resource, not a path"):format(res))
    end
    local path = "ssh_keys/" .. res
    local ok, key = pcall(crypto.key, { resource = path })
    if not ok then fail(self, key) end
    return key.public_ssh, path
  end
  local name = ("loom-" .. node:gsub("[^%w%._%-]", "-"))
  local path = "ssh_keys/" .. name
  return fs.with_lock("locks/" .. name .. ".lock", function()
    local key
    if fs.exists(path) then
      key = crypto.key({ resource = path })
    elseif not generate then
      return nil, path
    else
      key = crypto.generate_key({ type = f.ssh_key_type ~= "" and f.ssh_key_type or nil, path = path, comment = name })
      log.info("generated an %s key for node %s in %s", key.type, node, path)
    end
    return key.public_ssh, path
  end)
end

local function instance_body(self, c, f, input, name, pubkey)
  local user = ssh_user(self, f)
  local key_type, key_blob = pubkey:match("^(%S+)%s+(%S+)")
  local disks = { {
    boot = true, autoDelete = true, type = "PERSISTENT", deviceName = name,
    initializeParams = {
      sourceImage = source_image(f.google_project, input.image),
      diskSizeGb = ("%d"):format(number(f.google_root_disk_size_gb, 10)),
      diskType = disk_type(c.zone, f.google_root_disk_type),
    },
  } }
  local n = 0
  for _, size in ipairs(split_list(f.google_data_disk_size_gb)) do
    local gb = tonumber(size)
    if gb == nil or gb < 0 then
      fail(self, ("google_data_disk_size_gb: %q is not a size in GB"):format(size))
    end
    if gb > 0 then
      n = n + 1
      local dn = name .. "-data" .. (n > 1 and tostring(n) or "")
      disks[#disks + 1] = { boot = false, autoDelete = true, type = "PERSISTENT", deviceName = dn,
        initializeParams = { diskName = dn, diskSizeGb = ("%d"):format(gb), diskType = disk_type(c.zone, f.google_data_disk_type) } }
    end
  end
  local nic = { network = "global/networks/" .. tostring(f.network ~= "" and f.network or "default") }
  if f.subnetwork and f.subnetwork ~= "" then
    local region = c.zone:gsub("%-%l$", "")
    nic.subnetwork = ("regions/%s/subnetworks/%s"):format(region, f.subnetwork)
  end
  if truthy(f.external_ip, true) then
    nic.accessConfigs = { { name = "External NAT", type = "ONE_TO_ONE_NAT" } }
  end
  return {
    name = name,
    machineType = ("zones/%s/machineTypes/%s"):format(c.zone, tostring(input.flavor)),
    disks = disks,
    networkInterfaces = { nic },
    labels = labels(self, f),
    metadata = { items = {
      { key = "ssh-keys", value = ("%s:%s %s %s"):format(user, key_type, key_blob, user) },
      -- The guest agent publishes the host keys as guest attributes.
      { key = "enable-guest-attributes", value = "TRUE" },
    } },
    scheduling = { automaticRestart = truthy(f.auto_restart, false), onHostMaintenance = "MIGRATE" },
    tags = { items = { "coopr" } },
  }
end

-- owned checks that an instance found by name is this node's.
local function owned(self, inst, node)
  local l = type(inst.labels) == "table" and inst.labels or {}
  if l["coopr-node"] == label(node) then return true end
  fail(self, ("instance %s exists and belongs to %s, not to node %s: give the node another hostname, or delete that instance")
    :format(inst.name, l["coopr-node"] and ("node " .. l["coopr-node"]) or "no Loom node", node))
end

local function digest(body)
  return crypto.sha256(require("loom.json").encode(body))
end

-- insert inserts the instance and waits for its operation. The requestId
-- is derived from the node and the request; when the operation it names
-- made an instance deleted since (the node was deleted and is created
-- again within the hour Compute Engine remembers requestIds), the next
-- requestId is derived from that operation, so every retry of this CREATE
-- follows the same chain.
local function insert(self, c, body, node)
  local d = digest(body)
  local rid = uuid(node .. "\n" .. body.name .. "\n" .. d)
  local path = "/zones/" .. c.zone .. "/instances"
  local what = ("inserting instance %s in %s"):format(body.name, c.zone)
  for _ = 1, MAX_REQUEST_HOPS do
    local resp, op = request(self, c, "POST", path, { query = { requestId = rid }, json = body }, true)
    if resp.status == 409 then
      -- The name is taken: ours from an earlier CREATE, or someone else's.
      local inst = get_instance(self, c, body.name, true)
      if inst and owned(self, inst, node) then return inst end
    elseif resp.status ~= 200 then
      raise(self, c:error(resp, op, what), true)
    else
      op = wait_op(self, c, op, what, true)
      local inst = get_instance(self, c, body.name, true)
      if inst then
        owned(self, inst, node)
        return inst
      end
      log.info("requestId %s belongs to operation %s, whose instance was deleted since: inserting with the next one", rid, tostring(op.name))
      rid = uuid(node .. "\n" .. body.name .. "\n" .. d .. "\n" .. tostring(op.id))
    end
  end
  fail(self, ("node %s was inserted and deleted %d times within the hour: giving up"):format(node, MAX_REQUEST_HOPS))
end

function Google:create(input)
  local f = input.fields
  if input.flavor == nil or input.image == nil or input.hostname == nil then
    fail(self, "CREATE needs config.flavor (a machine type), config.image (an image) and config.hostname")
  end
  local c = client(self, f)
  local node = node_id(self.task)
  local name = instance_name(input.hostname)
  if not name:match(NAME) then
    fail(self, ("hostname %q gives no usable instance name"):format(tostring(input.hostname)))
  end

  local inst = get_instance(self, c, name, true)
  local pubkey, key_file = login_key(self, f, node, inst == nil)
  if inst then
    owned(self, inst, node)
    log.info("instance %s (%s) already exists for node %s: reusing it", name, tostring(inst.status), node)
  else
    local body = instance_body(self, c, f, input, name, pubkey)
    log.info("inserting instance %s (%s, %s) in %s for node %s", name, body.machineType, body.disks[1].initializeParams.sourceImage, c.zone, node)
    inst = insert(self, c, body, node)
    log.info("instance %s is %s", name, tostring(inst.status))
  end

  self.result.result.providerid = name
  self.result.result["ssh-auth"].user = ssh_user(self, f)
  -- The automators dial ssh-auth.port (22 when absent).
  local port = tonumber(f.ssh_port)
  if port and port ~= 22 then self.result.result["ssh-auth"].port = port end
  self.result.result["ssh-auth"].identityfile = self.env.work_dir .. "/" .. key_file
  if not fs.exists(key_file) then
    log.warn("the private key %s is not in the work dir; automators will need it", key_file)
  end
  self.result.status = 0
end

-- CONFIRM ----------------------------------------------------------------

local function pause(self, seconds, why)
  if not time then
    fail(self, why .. "; waiting needs the loom.time module, which this loomd does not provide")
  end
  if seconds > gce.remaining() then
    fail(self, why .. (" and the hook deadline leaves no time to wait %.1fs more (raise timeouts.%s in google.json)")
      :format(seconds, self.env.hook))
  end
  time.sleep(seconds)
end

local WAITING = { PROVISIONING = true, STAGING = true, PENDING = true, REPAIRING = true }

local function wait_running(self, c, name)
  local last
  while true do
    local inst = get_instance(self, c, name, false)
    if inst == nil then
      fail(self, ("Compute Engine has no instance %s in %s (deleted outside Loom, or in another zone?)"):format(name, c.zone))
    end
    if inst.status ~= last then
      log.info("instance %s is %s", name, tostring(inst.status))
      last = inst.status
    end
    if inst.status == "RUNNING" then return inst end
    if not WAITING[inst.status] then
      fail(self, ("instance %s is %s%s, not starting: start it or delete the node"):format(name, tostring(inst.status),
        inst.statusMessage and (" (" .. tostring(inst.statusMessage) .. ")") or ""))
    end
    pause(self, c.poll_interval, ("instance %s is still %s"):format(name, tostring(inst.status)))
  end
end

local HOST_KEY_TYPES = {
  ["ssh-ed25519"] = "ed25519", ["ssh-rsa"] = "rsa",
  ["ecdsa-sha2-nistp256"] = "ecdsa", ["ecdsa-sha2-nistp384"] = "ecdsa", ["ecdsa-sha2-nistp521"] = "ecdsa",
}

-- guest_host_keys polls the instance's guest attributes (namespace
-- hostkeys, which Google's guest agent publishes when the metadata has
-- enable-guest-attributes) for up to host_key_wait seconds. They come
-- from the machine over Compute Engine's API, so keys read there are
-- trusted, unlike a first keyscan.
local function guest_host_keys(self, c, name, f)
  local budget = number(f.host_key_wait, 180)
  if budget <= 0 then return nil end
  local started = gce.now()
  local path = "/zones/" .. c.zone .. "/instances/" .. name .. "/getGuestAttributes"
  while true do
    local resp, body = request(self, c, "GET", path, { query = { queryPath = "hostkeys/" } }, false)
    if resp.status == 200 and type(body) == "table" and type(body.queryValue) == "table" then
      local keys, n = {}, 0
      for _, e in ipairs(body.queryValue.items or {}) do
        local t = HOST_KEY_TYPES[e.key]
        if t and type(e.value) == "string" and e.value ~= "" and not keys[t] then
          keys[t] = e.value
          n = n + 1
        end
      end
      if n > 0 then return keys end
    elseif resp.status ~= 404 then
      log.warn("could not read the guest attributes of %s: %s", name, c:error(resp, body, "reading guest attributes").message)
      return nil
    end
    if gce.now() - started + c.poll_interval > budget or c.poll_interval > gce.remaining() or not time then
      log.warn("no SSH host keys in the guest attributes of %s within %ds (an image without Google's guest agent?)", name, math.floor(budget))
      return nil
    end
    time.sleep(c.poll_interval)
  end
end

-- scan waits for sshd on host:port (loom.ssh's wait_host_keys: a keyscan
-- every interval, within ssh_wait and the hook's deadline) and returns its
-- keys, or nil and why.
local function scan(self, host, f, interval)
  local have_ssh, ssh = pcall(require, "loom.ssh")
  if not have_ssh then return nil, "loom.ssh is not available" end
  return ssh.wait_host_keys({ host = host, port = number(f.ssh_port, 22), timeout = math.max(number(f.ssh_wait, 300), 0),
    interval = interval })
end

function Google:confirm(input)
  local f = input.fields
  local name = check_name(self, tostring(input.providerid or ""))
  local c = client(self, f)
  local inst = wait_running(self, c, name)
  local nic = type(inst.networkInterfaces) == "table" and inst.networkInterfaces[1] or {}
  local private = nic.networkIP
  local public = type(nic.accessConfigs) == "table" and nic.accessConfigs[1] and nic.accessConfigs[1].natIP or nil
  if private == "" then private = nil end
  if public == "" then public = nil end
  local access = public or private
  if f.bootstrap_interface == "bind_v4" then access = private or public end
  if access == nil then
    fail(self, ("instance %s runs but has no IP address"):format(name))
  end
  local hostname = self.task.config.hostname
  if truthy(f.provider_hostname, false) and public then
    -- Google's reverse DNS name of an external address.
    local a, b, cc, d = public:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$")
    if a then hostname = ("%s.%s.%s.%s.bc.googleusercontent.com"):format(d, cc, b, a) end
  end
  self.result.ipaddresses = { access_v4 = access, bind_v4 = private or public }
  self.result.hostname = hostname
  log.info("instance %s runs at %s (private %s)", name, tostring(public), tostring(private))

  local keys = guest_host_keys(self, c, name, f)
  if keys then
    self.result.result.ssh_host_keys = keys
    log.info("recorded the SSH host keys of %s from its guest attributes", name)
  end
  if truthy(f.wait_for_ssh, true) then
    local scanned, why = scan(self, access, f, c.poll_interval)
    if scanned == nil then
      if keys then fail(self, why) end
      log.warn("%s: CONFIRM succeeds without ssh_host_keys", tostring(why))
    elseif keys then
      local match = false
      for typ, blob in pairs(scanned) do match = match or keys[typ] == blob end
      if not match then
        fail(self, ("sshd on %s presents host keys that the guest attributes of %s do not list: refusing it (is the address another machine's?)")
          :format(access, name))
      end
    else
      self.result.result.ssh_host_keys = scanned
      log.warn("recorded the SSH host keys sshd on %s presents (no guest attributes): trusted on first use", access)
    end
  end
  self.result.status = 0
end

-- DELETE -----------------------------------------------------------------

local function delete_instance(self, c, name)
  local what = ("deleting instance %s in %s"):format(name, c.zone)
  local resp, op = request(self, c, "DELETE", "/zones/" .. c.zone .. "/instances/" .. name, nil, false)
  if resp.status == 404 then
    log.info("instance %s was already gone", name)
    return
  end
  if resp.status ~= 200 then
    fail(self, c:error(resp, op, what))
  end
  local ok, err = pcall(c.wait, c, op, what)
  if not ok then
    if type(err) == "table" and err.code == "RESOURCE_NOT_FOUND" then
      log.info("instance %s was already gone", name)
      return
    end
    fail(self, err)
  end
  log.info("deleted instance %s", name)
end

function Google:delete(input)
  local f = input.fields
  local c = client(self, f)
  local node = node_id(self.task)
  local providerid = input.providerid
  if providerid == nil or providerid == "" then
    local filter = ('labels.coopr-node = "%s"'):format(label(node))
    local resp, body = request(self, c, "GET", "/zones/" .. c.zone .. "/instances", { query = { filter = filter } }, false)
    if resp.status ~= 200 then
      fail(self, c:error(resp, body, "listing the instances labelled coopr-node=" .. label(node)))
    end
    local items = type(body) == "table" and body.items or {}
    if #items == 0 then
      log.info("no providerid and no instance labelled coopr-node=%s in %s: nothing to delete", label(node), c.zone)
    end
    for _, inst in ipairs(items) do
      log.info("no providerid: deleting instance %s, labelled coopr-node=%s", inst.name, label(node))
      delete_instance(self, c, inst.name)
    end
  else
    local name = check_name(self, tostring(providerid))
    local inst = get_instance(self, c, name, false)
    if inst == nil then
      log.info("instance %s was already gone", name)
    else
      local owner = type(inst.labels) == "table" and inst.labels["coopr-node"] or nil
      if owner ~= nil and owner ~= label(node) then
        fail(self, ("instance %s belongs to node %s, not %s: refusing to delete it (is the providerid stale?)"):format(name, owner, node))
      end
      delete_instance(self, c, name)
    end
  end
  if f.ssh_key_resource == nil or f.ssh_key_resource == "" then
    if fs.remove("ssh_keys/loom-" .. node:gsub("[^%w%._%-]", "-")) then
      log.info("deleted the node's generated key")
    end
  end
  self.result.status = 0
end
