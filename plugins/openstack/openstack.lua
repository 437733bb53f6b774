-- OpenStack provider: servers on any OpenStack cloud (Keystone v3, Nova,
-- Neutron), and on Rackspace's public cloud through its own identity
-- service (the Rackspace class at the end, Coopr's rackspace type).
--
--   create(input)   makes (or finds again) the node's server
--   confirm(input)  waits until it is ACTIVE, attaches a floating IP when
--                   asked, reports its addresses and records its SSH host
--                   keys
--   delete(input)   deletes it and releases the floating IPs made for it
--
-- Every server carries the metadata loom_node=<nodeId> and
-- loom_cluster=<clusterId>. That is what makes CREATE idempotent: a CREATE
-- that runs again (a retry, an answer lost on the way back) looks the
-- node's server up by its name and metadata before posting, and after any
-- failure that leaves it unknown whether Nova made the server; and what
-- lets a DELETE without a providerid find it.
--
-- It is the Loom port of Coopr's FogProviderOpenstack: the same fields
-- (api_user, api_password, openstack_tenant, openstack_auth_url,
-- ssh_keypair, ssh_key_resource, security_groups, network_ids,
-- availability_zone, floating_ip, user_data_resource,
-- openstack_ssl_verify_peer), so Coopr's fog_provider.json definition
-- loads with this file unchanged (FogProviderOpenstack below).
--
-- Failures raise an error table {kind, message, ...}. On CREATE, a
-- credential failure sets Coopr's "nothing was created" status: 201 when
-- Keystone refuses the credentials, 202 when the cloud forbids the request
-- (no role on the project, over quota).

local loom = require("loom")
local fs = require("loom.fs")
local client = require("lib.openstack.client")
local util = require("lib.openstack.util")

OpenStack = loom.Provider:extend("OpenStack")

-- How many times CREATE posts the server when Nova answers 5xx or the
-- answer is lost (checking for the node's server before each new try).
local CREATE_ATTEMPTS = 3

-- Pages of a full server listing a DELETE without providerid walks at most.
local MAX_PAGES = 20
local PAGE_SIZE = 200

-- Nova statuses CONFIRM waits through; anything else but ACTIVE fails.
local WAITING = { BUILD = true, REBUILD = true, REBOOT = true, HARD_REBOOT = true, MIGRATING = true, RESIZE = true,
  VERIFY_RESIZE = true, PASSWORD = true, UNKNOWN = true }

-- Helpers ----------------------------------------------------------------

local function fail(self, err, status)
  if type(err) ~= "table" then
    err = { kind = "openstack", message = tostring(err) }
  end
  self.result.status = status or 1
  error(err, 0)
end

-- credential_status is Coopr's "nothing was created" code for a CREATE
-- that failed before any server existed: 201 for credentials Keystone
-- refused, 202 for a request the cloud forbids.
local function credential_status(err)
  if type(err) ~= "table" then return 1 end
  if err.kind == "auth" then return err.http_status == 403 and 202 or 201 end
  if err.http_status == 401 then return 201 end
  if err.http_status == 403 then return 202 end
  return 1
end

local function node_id(task)
  return tostring(task.nodeId or task.taskId)
end

local function server_id(self, providerid)
  local id = tostring(providerid or "")
  if not util.id_ok(id) then
    fail(self, ("providerid %q is not an OpenStack server id; was CREATE run by this provider?"):format(id))
  end
  return id
end

local function connect(self, fields)
  local ok, c = pcall(client.new, fields)
  if not ok then fail(self, c) end
  return c
end

-- call runs os_api:request and turns a raised error into fail() with the
-- status CREATE needs.
local function call(self, os_api, service, method, path, opts, status_of_err)
  local ok, resp = pcall(os_api.request, os_api, service, method, path, opts)
  if not ok then
    fail(self, resp, status_of_err and status_of_err(resp) or 1)
  end
  return resp
end

-- The servers CREATE made for this node: by name (Nova's filter is a
-- regular expression) and then by metadata, which is what proves it ours.
local function servers_named(self, os_api, name, node)
  local resp = call(self, os_api, "compute", "GET", "/servers/detail",
    { query = { name = "^" .. util.regex_quote(name) .. "$" }, retries = 4,
      what = "looking for the server of node " .. node }, credential_status)
  if not resp.ok then
    local err = os_api:api_error(resp, "looking for the server of node " .. node)
    fail(self, err, credential_status(err))
  end
  local out = {}
  for _, s in ipairs(resp:json().servers or {}) do
    if type(s.metadata) == "table" and s.metadata.loom_node == node and s.status ~= "DELETED"
        and s.status ~= "SOFT_DELETED" then
      out[#out + 1] = s
    end
  end
  return out
end

-- all_servers_of walks the project's servers (paginated) for the node's
-- metadata: a DELETE without providerid whose hostname is unknown.
local function all_servers_of(self, os_api, node)
  local out, marker = {}, nil
  for _ = 1, MAX_PAGES do
    local q = { limit = PAGE_SIZE }
    if marker then q.marker = marker end
    local resp = call(self, os_api, "compute", "GET", "/servers/detail", { query = q, retries = 4,
      what = "listing the project's servers" })
    if not resp.ok then fail(self, os_api:api_error(resp, "listing the project's servers")) end
    local page = resp:json().servers or {}
    for _, s in ipairs(page) do
      if type(s.metadata) == "table" and s.metadata.loom_node == node then out[#out + 1] = s end
    end
    if #page < PAGE_SIZE then return out end
    marker = page[#page].id
  end
  log.warn("stopped looking for node %s's servers after %d pages", node, MAX_PAGES)
  return out
end

-- oldest picks one server of several (a concurrent CREATE raced this one):
-- the oldest, so every retry settles on the same one.
local function oldest(servers, node)
  if #servers <= 1 then return servers[1] end
  table.sort(servers, function(a, b)
    if a.created ~= b.created then return tostring(a.created) < tostring(b.created) end
    return tostring(a.id) < tostring(b.id)
  end)
  local others = {}
  for i = 2, #servers do others[#others + 1] = tostring(servers[i].id) end
  log.warn("%d servers carry loom_node=%s; using %s, delete the others: %s", #servers, node, tostring(servers[1].id),
    table.concat(others, ", "))
  return servers[1]
end

-- CREATE -----------------------------------------------------------------

-- resolve_flavor takes a flavor id, or a name when the cloud has no flavor
-- with that id (Coopr's hardware types often map to names such as
-- m1.small).
local function resolve_flavor(self, os_api, flavor)
  local what = "looking up flavor " .. flavor
  if util.id_ok(flavor) then
    local resp = call(self, os_api, "compute", "GET", "/flavors/" .. flavor, { retries = 4, what = what }, credential_status)
    if resp.ok then return flavor end
    if resp.status ~= 404 then
      local err = os_api:api_error(resp, what)
      fail(self, err, credential_status(err))
    end
  end
  local resp = call(self, os_api, "compute", "GET", "/flavors", { retries = 4, what = what }, credential_status)
  if not resp.ok then
    local err = os_api:api_error(resp, what)
    fail(self, err, credential_status(err))
  end
  local names = {}
  for _, fl in ipairs(resp:json().flavors or {}) do
    if fl.name == flavor then return tostring(fl.id) end
    names[#names + 1] = ("%s (%s)"):format(tostring(fl.name), tostring(fl.id))
  end
  fail(self, ("no flavor %q (by id or name) in this cloud (config.flavor, from the hardware type); it has: %s")
    :format(flavor, #names > 0 and table.concat(names, ", ") or "no flavors"), 1)
end

-- resolve_image takes an image id (a UUID), or a name looked up in the
-- image service (Glance v2): exactly one active image must have it.
local function resolve_image(self, os_api, image)
  if image:match("^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x$") then
    return image
  end
  local what = "looking up image " .. image
  if not os_api:has("image") then
    -- Without Glance in the catalog (some Rackspace-style clouds) the
    -- value goes to Nova as it is.
    return image
  end
  local resp = call(self, os_api, "image", "GET", "/v2/images", { query = { name = image, status = "active" },
    retries = 4, what = what }, credential_status)
  if not resp.ok then
    local err = os_api:api_error(resp, what)
    fail(self, err, credential_status(err))
  end
  local found = resp:json().images or {}
  if #found == 1 then return tostring(found[1].id) end
  if #found == 0 then
    -- Not a name: an id in a cloud whose ids are not UUIDs.
    return image
  end
  local ids = {}
  for _, im in ipairs(found) do ids[#ids + 1] = tostring(im.id) end
  fail(self, ("%d active images are named %q (%s): give config.image as an id"):format(#found, image, table.concat(ids, ", ")), 1)
end

-- metadata_field reads the extra metadata: a JSON object, or k=v pairs
-- separated by commas.
local function metadata_field(self, v)
  local out = {}
  local s = util.str(v)
  if s == "" then return out end
  if s:sub(1, 1) == "{" then
    local json = require("loom.json")
    local ok, doc = pcall(json.decode, s)
    if not ok or type(doc) ~= "table" then
      fail(self, ("metadata %q is neither a JSON object nor k=v pairs"):format(s))
    end
    for k, x in pairs(doc) do out[tostring(k)] = tostring(x) end
    return out
  end
  for _, pair in ipairs(util.split_list(s)) do
    local k, x = pair:match("^([^=]+)=(.*)$")
    if not k then fail(self, ("metadata entry %q is not k=v"):format(pair)) end
    out[util.trim(k)] = util.trim(x)
  end
  return out
end

-- user_data returns the server's user data, base64-encoded as Nova wants:
-- the user_data field, or Coopr's user_data_resource (a file of the
-- provider's user_data resource).
local function user_data(self, f)
  local name = util.str(f.user_data_resource)
  if name ~= "" then
    if name:find("/", 1, true) or name == ".." or name == "." then
      fail(self, ("user_data_resource %q must be a file name in the user_data resource, not a path"):format(name))
    end
    local ok, text = pcall(fs.read, "user_data/" .. name)
    if not ok then
      fail(self, ("reading user_data/%s (user_data_resource): %s"):format(name, type(text) == "table" and text.message or tostring(text)))
    end
    return util.base64(text)
  end
  local inline = f.user_data
  if inline ~= nil and inline ~= "" then return util.base64(tostring(inline)) end
  return nil
end

-- post_server creates the server, or returns nil and the error of a
-- request Nova refused. An answer that leaves it unknown whether Nova made
-- the server (5xx, a lost connection, a timeout) is followed by a lookup
-- of the node's server before posting again: a retry never makes a second
-- server.
local function post_server(self, os_api, body, node)
  local name = body.server.name
  local what = "creating server " .. name
  for attempt = 1, CREATE_ATTEMPTS do
    local ok, resp = pcall(os_api.request, os_api, "compute", "POST", "/servers", { json = body, what = what })
    if ok and (resp.status == 202 or resp.status == 200) then
      return resp:json().server
    end
    if ok and resp.status < 500 then
      return nil, os_api:api_error(resp, what)
    end
    if not ok and (type(resp) ~= "table" or (resp.kind ~= "connect" and resp.kind ~= "timeout")) then
      -- Auth, a throttle past the deadline, config, a bug: retrying cannot help.
      fail(self, resp, credential_status(resp))
    end
    local why = ok and os_api:api_error(resp, what) or resp
    local found = servers_named(self, os_api, name, node)
    if #found > 0 then
      local s = oldest(found, node)
      log.info("%s failed (%s), but server %s exists for the node: using it", what, tostring(why.message), tostring(s.id))
      return s
    end
    if attempt == CREATE_ATTEMPTS then fail(self, why) end
    local wait = 2 ^ attempt
    log.warn("%s; no server exists for the node: posting again in %ds", tostring(why.message), wait)
    local sok, serr = pcall(client.sleep, wait, tostring(why.message))
    if not sok then fail(self, serr) end
  end
end

function OpenStack:create(input)
  local f = input.fields
  if input.flavor == nil or input.image == nil or input.hostname == nil then
    fail(self, "CREATE needs config.flavor (a flavor id or name), config.image (an image id or name) and config.hostname")
  end
  local os_api = connect(self, f)
  local node = node_id(self.task)
  local name = tostring(input.hostname)

  local server = oldest(servers_named(self, os_api, name, node), node)
  if server then
    log.info("server %s (%s) already exists for node %s: reusing it", tostring(server.id), tostring(server.name), node)
  else
    local md = metadata_field(self, f.metadata)
    md.loom_node = node
    md.loom_cluster = tostring(self.task.clusterId or "")
    local body = { server = {
      name = name,
      flavorRef = resolve_flavor(self, os_api, tostring(input.flavor)),
      imageRef = resolve_image(self, os_api, tostring(input.image)),
      metadata = md,
    } }
    local s = body.server
    local keypair = util.str(f.ssh_keypair)
    if keypair ~= "" then s.key_name = keypair end
    local groups = util.split_list(f.security_groups)
    if #groups > 0 then
      s.security_groups = {}
      for _, g in ipairs(groups) do s.security_groups[#s.security_groups + 1] = { name = g } end
    end
    local nets = util.split_list(f.network_ids)
    if #nets > 0 then
      s.networks = {}
      for _, n in ipairs(nets) do s.networks[#s.networks + 1] = { uuid = n } end
    end
    local az = util.str(f.availability_zone)
    if az ~= "" then s.availability_zone = az end
    if util.truthy(f.config_drive, false) then s.config_drive = true end
    s.user_data = user_data(self, f)
    log.info("creating server %s: flavor %s, image %s%s", name, s.flavorRef, s.imageRef,
      keypair ~= "" and (", key pair " .. keypair) or "")
    local err
    server, err = post_server(self, os_api, body, node)
    if not server then
      fail(self, err, credential_status(err))
    end
    log.info("created server %s (%s)", tostring(server.id), name)
  end

  self.result.result.providerid = tostring(server.id)
  local auth = self.result.result["ssh-auth"]
  auth.user = self.task.config.sshuser or "root"
  if type(server.adminPass) == "string" and server.adminPass ~= "" then
    -- Rackspace and clouds without key injection: the root password Nova
    -- generated, only ever in this answer.
    auth.password = server.adminPass
  end
  local key = util.str(f.ssh_key_resource)
  if key ~= "" then
    if key:find("/", 1, true) or key == ".." or key == "." then
      fail(self, ("ssh_key_resource %q must be a file name in the ssh_keys resource, not a path"):format(key))
    end
    local rel = "ssh_keys/" .. key
    if not fs.exists(rel) then
      log.warn("the private key %s is not in the work dir yet; automators will need it", rel)
    end
    auth.identityfile = self.env.work_dir .. "/" .. rel
  end
  local port = tonumber(f.ssh_port)
  if port and port ~= 22 then auth.port = port end
  self.result.status = 0
end

-- CONFIRM ----------------------------------------------------------------

-- addresses picks the access (SSH) and bind addresses from a server's
-- addresses, as Coopr's FogProviderOpenstack did: a floating IP, else
-- accessIPv4 (Rackspace), else the "public" network; bind: a fixed address,
-- the "private" network's first.
local function addresses(server)
  local floating, fixed, public, private
  local nets = type(server.addresses) == "table" and server.addresses or {}
  local names = {}
  for n in pairs(nets) do names[#names + 1] = n end
  table.sort(names)
  for _, n in ipairs(names) do
    for _, a in ipairs(nets[n]) do
      if tonumber(a.version) == 4 and a.addr then
        local typ = a["OS-EXT-IPS:type"]
        if typ == "floating" then floating = floating or a.addr end
        if n == "public" then public = public or a.addr end
        if n == "private" then private = private or a.addr end
        if typ ~= "floating" and n ~= "public" then fixed = fixed or a.addr end
      end
    end
  end
  local access = floating or (server.accessIPv4 ~= "" and server.accessIPv4) or public or private or fixed
  local bind = private or fixed or access
  return access, bind, floating
end

local function get_server(self, os_api, id)
  local what = "reading server " .. id
  local resp = call(self, os_api, "compute", "GET", "/servers/" .. id, { retries = 4, what = what })
  if resp.status == 404 then
    fail(self, ("server %s does not exist (deleted outside Loom?)"):format(id))
  elseif not resp.ok then
    fail(self, os_api:api_error(resp, what))
  end
  return resp:json().server
end

local function wait_active(self, os_api, id, interval, rackconnect)
  local last = nil
  while true do
    local s = get_server(self, os_api, id)
    local st = tostring(s.status)
    local rc = type(s.metadata) == "table" and s.metadata.rackconnect_automation_status or nil
    local label = rackconnect and (st .. ", RackConnect " .. tostring(rc)) or st
    if label ~= last then
      log.info("server %s is %s", id, label)
      last = label
    end
    if st == "ACTIVE" and (not rackconnect or rc == "DEPLOYED") then
      return s
    end
    if st == "ERROR" then
      local fault = type(s.fault) == "table" and s.fault.message or "no fault message"
      fail(self, ("server %s is in ERROR: %s; delete it (DELETE) and create the node again"):format(id, tostring(fault)))
    end
    if rackconnect and rc == "FAILED" then
      fail(self, ("server %s: RackConnect automation failed (rackconnect_automation_status FAILED)"):format(id))
    end
    if st ~= "ACTIVE" and not WAITING[st] then
      fail(self, ("server %s is %s, not starting: start it or delete it"):format(id, st))
    end
    local ok, err = pcall(client.sleep, interval, ("server %s is still %s"):format(id, label))
    if not ok then
      err.message = err.message .. (" (raise timeouts.%s in the definition)"):format(self.env.hook)
      fail(self, err)
    end
  end
end

-- The marker of the floating IPs this provider allocates, in their
-- description: DELETE releases exactly those.
local function fip_marker(node)
  return "loom node " .. node
end

-- server_port returns the Neutron port of the server that holds its bind
-- address (or its first port).
local function server_port(self, os_api, id, bind)
  local what = "listing the ports of server " .. id
  local resp = call(self, os_api, "network", "GET", "/v2.0/ports", { query = { device_id = id }, retries = 4, what = what })
  if not resp.ok then fail(self, os_api:api_error(resp, what)) end
  local ports = resp:json().ports or {}
  for _, p in ipairs(ports) do
    for _, ip in ipairs(p.fixed_ips or {}) do
      if ip.ip_address == bind then return p end
    end
  end
  if ports[1] == nil then fail(self, ("server %s has no network port to attach a floating IP to"):format(id)) end
  return ports[1]
end

-- external_network returns the floating IP pool: the floating_network
-- field (a network id or name), else the project's one external network.
local function external_network(self, os_api, wanted)
  local what = "looking for the external network"
  local q = { ["router:external"] = "true" }
  local resp = call(self, os_api, "network", "GET", "/v2.0/networks", { query = q, retries = 4, what = what })
  if not resp.ok then fail(self, os_api:api_error(resp, what)) end
  local nets, names = resp:json().networks or {}, {}
  for _, n in ipairs(nets) do
    if wanted ~= "" and (n.id == wanted or n.name == wanted) then return n.id end
    names[#names + 1] = ("%s (%s)"):format(tostring(n.name), tostring(n.id))
  end
  if wanted == "" and #nets == 1 then return nets[1].id end
  if wanted == "" then
    fail(self, ("floating_ip needs a pool: the cloud has %d external networks (%s); set floating_network")
      :format(#nets, #names > 0 and table.concat(names, ", ") or "none"))
  end
  fail(self, ("floating_network %q is not an external network of this cloud; external networks: %s")
    :format(wanted, #names > 0 and table.concat(names, ", ") or "none"))
end

-- attach_floating_ip gives the server a floating IP: the one already on
-- its port (a CONFIRM run again), or a new one allocated from the pool
-- and associated in the same call, described as this node's so DELETE
-- releases it.
local function attach_floating_ip(self, os_api, f, server, bind, node)
  local id = tostring(server.id)
  local port = server_port(self, os_api, id, bind)
  local what = "looking for the floating IP of server " .. id
  local resp = call(self, os_api, "network", "GET", "/v2.0/floatingips", { query = { port_id = port.id }, retries = 4, what = what })
  if not resp.ok then fail(self, os_api:api_error(resp, what)) end
  local have = (resp:json().floatingips or {})[1]
  if have then
    log.info("server %s already has floating IP %s", id, tostring(have.floating_ip_address))
    return have.floating_ip_address
  end
  local net = external_network(self, os_api, util.str(f.floating_network))
  local body = { floatingip = { floating_network_id = net, port_id = port.id, description = fip_marker(node) } }
  local fixed = nil
  for _, ip in ipairs(port.fixed_ips or {}) do
    if ip.ip_address == bind then fixed = bind end
  end
  if fixed then body.floatingip.fixed_ip_address = fixed end
  what = "allocating a floating IP for server " .. id
  local ok, cresp = pcall(os_api.request, os_api, "network", "POST", "/v2.0/floatingips", { json = body, what = what })
  if ok and cresp.status == 201 then
    local fip = cresp:json().floatingip
    log.info("attached floating IP %s to server %s", tostring(fip.floating_ip_address), id)
    return fip.floating_ip_address
  end
  if ok and cresp.status < 500 then fail(self, os_api:api_error(cresp, what)) end
  -- The answer is unknown: the IP may exist. Look again rather than
  -- allocating a second one on the next run.
  local again = call(self, os_api, "network", "GET", "/v2.0/floatingips", { query = { port_id = port.id }, retries = 4, what = what })
  local got = again.ok and (again:json().floatingips or {})[1]
  if got then return got.floating_ip_address end
  fail(self, ok and os_api:api_error(cresp, what) or cresp)
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

function OpenStack:confirm(input)
  local f = input.fields
  local id = server_id(self, input.providerid)
  local os_api = connect(self, f)
  local interval = tonumber(f.poll_interval) or 0
  if interval <= 0 then interval = 5 end

  local s = wait_active(self, os_api, id, interval, util.truthy(f.rackconnect_wait, false))
  local access, bind, floating = addresses(s)
  if access == nil then
    fail(self, ("server %s is ACTIVE but has no IPv4 address; check its networks (network_ids)"):format(id))
  end
  if util.truthy(f.floating_ip, false) and not floating then
    access = attach_floating_ip(self, os_api, f, s, bind, node_id(self.task))
  end
  -- access_v4 is what automators SSH to; bind_v4 what services listen on.
  self.result.ipaddresses = { access_v4 = access, bind_v4 = bind }
  log.info("server %s is ACTIVE at %s (bind %s)", id, tostring(access), tostring(bind))
  if util.truthy(f.wait_for_ssh, true) then
    record_host_keys(self, access, f, interval)
  end
  self.result.status = 0
end

-- DELETE -----------------------------------------------------------------

-- release_floating_ips deletes the floating IPs allocated for the node (by
-- their description). Failures are warnings: the server's deletion must
-- not wait on them.
local function release_floating_ips(os_api, node)
  if not os_api:has("network") then return end
  local what = "looking for node " .. node .. "'s floating IPs"
  local ok, resp = pcall(os_api.request, os_api, "network", "GET", "/v2.0/floatingips",
    { query = { description = fip_marker(node) }, retries = 4, what = what })
  if not ok or not resp.ok then
    log.warn("%s failed: %s", what, ok and os_api:api_error(resp, what).message or tostring(resp.message))
    return
  end
  for _, fip in ipairs(resp:json().floatingips or {}) do
    if fip.description == fip_marker(node) and util.id_ok(fip.id) then
      local dwhat = "releasing floating IP " .. tostring(fip.floating_ip_address)
      local dok, dresp = pcall(os_api.request, os_api, "network", "DELETE", "/v2.0/floatingips/" .. fip.id, { retries = 4, what = dwhat })
      if dok and (dresp.status == 204 or dresp.status == 404) then
        log.info("released floating IP %s", tostring(fip.floating_ip_address))
      else
        log.warn("%s failed: %s", dwhat, dok and os_api:api_error(dresp, dwhat).message or tostring(dresp.message))
      end
    end
  end
end

local function delete_server(self, os_api, id)
  local what = "deleting server " .. id
  local resp = call(self, os_api, "compute", "DELETE", "/servers/" .. id, { retries = 4, what = what })
  if resp.status == 204 or resp.status == 202 then
    log.info("deleted server %s", id)
  elseif resp.status == 404 then
    log.info("server %s was already gone", id)
  else
    fail(self, os_api:api_error(resp, what))
  end
end

function OpenStack:delete(input)
  local os_api = connect(self, input.fields)
  local node = node_id(self.task)
  local providerid = input.providerid
  release_floating_ips(os_api, node)
  if providerid == nil or providerid == "" then
    -- CREATE may have made a server and died before reporting its id:
    -- the node's metadata still finds it.
    local hostname = self.task.config.hostname
    local found = {}
    if hostname ~= nil and hostname ~= "" then
      found = servers_named(self, os_api, tostring(hostname), node)
    end
    if #found == 0 then
      found = all_servers_of(self, os_api, node)
    end
    if #found == 0 then
      log.info("no providerid and no server carries loom_node=%s: nothing to delete", node)
    end
    for _, s in ipairs(found) do
      delete_server(self, os_api, server_id(self, tostring(s.id)))
    end
    self.result.status = 0
    return
  end
  delete_server(self, os_api, server_id(self, providerid))
  self.result.status = 0
end

-- Coopr's fog_provider.json names this class for its openstack type.
FogProviderOpenstack = OpenStack

-- Rackspace ----------------------------------------------------------------

-- Rackspace's public cloud (Coopr's rackspace type, FogProviderRackspace):
-- Nova servers behind Rackspace's own identity service (Keystone v2.0 with
-- an API key). Its fields are Coopr's (api_user, api_password holding the
-- API key, rackspace_region, rackconnect_wait, ssh_keypair,
-- ssh_key_resource) and fog's rackspace_auth_url, rackspace_config_drive
-- and rackspace_metadata; they are mapped onto the OpenStack hooks, which
-- do the work: the same metadata lookup, accessIPv4, adminPass and
-- RackConnect wait.
Rackspace = OpenStack:extend("Rackspace")

-- rackspace_fields maps the rackspace type's fields onto the OpenStack
-- hooks' (a new table: the task's own stays as it came).
local function rackspace_fields(self, f)
  local out = {}
  for k, v in pairs(f or {}) do out[k] = v end
  out.identity = "rackspace"
  out.api_key = f.api_password
  out.region = util.str(f.rackspace_region, "dfw")
  out.auth_url = f.rackspace_auth_url
  if f.rackspace_config_drive ~= nil then out.config_drive = f.rackspace_config_drive end
  local md = f.rackspace_metadata
  if type(md) == "table" then
    -- Coopr passed fog a hash; the OpenStack hooks read JSON or k=v.
    local json = require("loom.json")
    md = json.encode(md)
  end
  if md ~= nil then out.metadata = md end
  if f.rackspace_files ~= nil and util.str(f.rackspace_files) ~= "" then
    log.warn("rackspace_files is not supported (Coopr injected local files of the provisioner's host); use user_data or config_drive instead")
  end
  return out
end

local function with_rackspace_fields(hook)
  return function(self, input)
    local mapped = {}
    for k, v in pairs(input) do mapped[k] = v end
    mapped.fields = rackspace_fields(self, input.fields)
    return hook(self, mapped)
  end
end

Rackspace.create = with_rackspace_fields(OpenStack.create)
Rackspace.confirm = with_rackspace_fields(OpenStack.confirm)
Rackspace.delete = with_rackspace_fields(OpenStack.delete)

-- Coopr's fog_provider.json names this class for its rackspace type.
FogProviderRackspace = Rackspace
