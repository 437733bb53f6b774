-- fakecloud: a kubermatic machine-controller cloud provider for a
-- Hetzner-like servers API. Instances are tagged with the machine's uid
-- (label machine-uid) and found by it, which makes create idempotent:
-- the controller calls get, then create when get says not_found.
--
-- cloudProviderSpec: {apiUrl, token, serverType (default "cx22"), location,
-- publicIp (default true)}. The definition declares token and publicIp as
-- machine-controller ConfigVars: under machine-controller the adapter
-- resolves them (a Secret, a ConfigMap, FAKECLOUD_TOKEN) before the hook
-- runs, so the hook always sees a plain string and boolean. It also
-- declares uid_tagging, which makes migrate_uid required.
local loom = require("loom")
local http = require("loom.http")

local FakeCloud = loom.CloudProvider:extend("FakeCloud")

local function spec_of(machine_spec)
  local v = machine_spec and machine_spec.providerSpec and machine_spec.providerSpec.value or {}
  return v.cloudProviderSpec or {}, v
end

local function api(cps, method, path, opts)
  if (cps.apiUrl or "") == "" or (cps.token or "") == "" then
    -- The webhook's validate rejects such a spec; a Machine that skipped
    -- it must not be retried forever.
    error({ terminal = true, reason = "InvalidConfiguration", message = "cloudProviderSpec needs apiUrl and token" })
  end
  opts = opts or {}
  opts.bearer, opts.retries = cps.token, 2
  local resp = http.request(method, cps.apiUrl .. path, opts)
  if resp.status == 401 then
    -- As Hetzner's provider: only unauthorized is terminal.
    error({ terminal = true, reason = "InvalidConfiguration", message = "the API rejected the token (401)" })
  end
  if not resp.ok and resp.status ~= 404 then
    error(("%s %s: %d %s"):format(method, path, resp.status, resp.body))
  end
  return resp:json(), resp.status
end

function FakeCloud:add_defaults(req)
  local cps = spec_of(req.spec)
  if cps.serverType == nil or cps.serverType == "" then cps.serverType = "cx22" end
  return req.spec
end

function FakeCloud:validate(req)
  local cps, v = spec_of(req.spec)
  if (cps.apiUrl or "") == "" or (cps.token or "") == "" then
    return nil, { terminal = true, reason = "InvalidConfiguration", message = "cloudProviderSpec needs apiUrl and token" }
  end
  if v.operatingSystem and v.operatingSystem ~= "ubuntu" and v.operatingSystem ~= "flatcar" then
    -- As Hetzner's provider: ErrOSNotSupported, made terminal.
    return nil, { terminal = true, reason = "os_not_supported",
                  message = "operating system " .. v.operatingSystem .. " is not supported (ubuntu, flatcar)" }
  end
end

local function instance(s)
  local addrs = {}
  if s.publicIp then addrs[s.publicIp] = "ExternalIP" end
  if s.privateIp then addrs[s.privateIp] = "InternalIP" end
  local status = ({ initializing = "creating", running = "running", deleting = "deleting" })[s.status] or "unknown"
  return { name = s.name, id = tostring(s.id), provider_id = "fakecloud://" .. tostring(s.id), addresses = addrs, status = status }
end

local function find(cps, uid)
  if (uid or "") == "" then
    error({ terminal = true, reason = "InvalidConfiguration", message = "the machine has no metadata.uid (its instance is labelled with it)" })
  end
  local body = api(cps, "GET", "/servers", { query = { label_selector = "machine-uid==" .. uid } })
  return body and body.servers and body.servers[1]
end

function FakeCloud:get(req)
  local cps = spec_of(req.machine.spec)
  local s = find(cps, req.machine.metadata.uid)
  if not s then return nil, { not_found = true, message = "instance not found" } end
  return instance(s)
end

function FakeCloud:create(req)
  local m = req.machine
  local cps = spec_of(m.spec)
  local s = find(cps, m.metadata.uid) -- a retried create finds its server
  if not s then
    local body = api(cps, "POST", "/servers", { json = {
      name = m.metadata.name, server_type = cps.serverType or "cx22", location = cps.location,
      public_ip = cps.publicIp ~= false, user_data = req.userdata, labels = { ["machine-uid"] = m.metadata.uid } } })
    s = body.server
  end
  -- Under machine-controller the adapter offers its MachineUpdater: note
  -- the server's id on the Machine, as several in-tree providers do.
  -- (loomd call and loomd test offer no host functions.)
  if self.host and self.host.update_machine then
    self.host.update_machine({ annotations = { ["fakecloud.example.com/server-id"] = tostring(s.id) } })
  end
  return instance(s)
end

-- The machine's uid changed (machine-controller's migration to
-- cluster.k8s.io): re-tag the server found by the old uid, or get would
-- find nothing and a second server would be created.
function FakeCloud:migrate_uid(req)
  local m = req.machine
  local cps = spec_of(m.spec)
  local s = find(cps, m.metadata.uid)
  if not s then return end -- no server yet, or re-tagged already
  api(cps, "PUT", "/servers/" .. tostring(s.id), { json = { labels = { ["machine-uid"] = req.new_uid } } })
end

function FakeCloud:cleanup(req)
  local cps = spec_of(req.machine.spec)
  local s = find(cps, req.machine.metadata.uid)
  if not s then return true end -- gone: the finalizer can go
  api(cps, "DELETE", "/servers/" .. tostring(s.id))
  return false -- called again in 10 s; then get finds nothing
end

function FakeCloud:metrics_labels(req)
  local cps = spec_of(req.machine.spec)
  return { size = cps.serverType or "cx22", location = cps.location or "" }
end

return FakeCloud
