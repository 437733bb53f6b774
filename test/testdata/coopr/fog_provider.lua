-- The test's stand-in for Coopr's fog provider classes (FogProviderAWS and
-- the five others fog_provider.json names), ported to Lua the way a Coopr
-- author ports a Ruby provider: same hooks, same inputs, same result keys
-- (providerid, ssh-auth with an identityfile in the ssh_keys resource,
-- ipaddresses, hostname, ssh_host_keys.rsa), status 201 for bad
-- credentials, an idempotent DELETE. Its "cloud" is cloud.json in the
-- provider's work dir: the machines it may hand out (the test's sshd).
-- One deviation from a real cloud: ssh-auth carries the machine's port,
-- because the test's sshd is not on port 22.

local loom = require("loom")
local json = require("loom.json")
local fs = require("loom.fs")

FogProviderAWS = loom.Provider:extend("FogProviderAWS")

local function instances()
  if not fs.exists("instances.json") then return {} end
  return json.decode(fs.read("instances.json"))
end

local function machine(id)
  for _, m in ipairs(json.decode(fs.read("cloud.json")).machines) do
    if m.id == id then return m end
  end
end

-- Coopr's fog providers never raised: they set a status and stderr.
function FogProviderAWS:refuse(status, msg)
  self.result.status = status
  self.result.stderr = msg
end

function FogProviderAWS:create(input)
  local f = input.fields
  if (f.api_user or "") == "" or (f.api_password or "") == "" then
    return self:refuse(201, "fog: invalid credentials: api_user and api_password are required")
  end
  local id = fs.with_lock("instances.lock", function()
    local inst = instances()
    -- A CREATE the server retries for the same host name gets the same
    -- instance, as a real cloud's idempotency token would.
    if not inst[input.hostname] then
      inst[input.hostname] = json.decode(fs.read("cloud.json")).machines[1].id
      fs.write("instances.json", json.encode(inst))
    end
    return inst[input.hostname]
  end)
  local m = machine(id)
  self.result.result.providerid = id
  self.result.result["ssh-auth"] = {
    user = m.user or self.task.config.sshuser or "root",
    identityfile = self.env.work_dir .. "/ssh_keys/" .. f.ssh_key_resource,
    port = m.port,
  }
  self.result.status = 0
end

function FogProviderAWS:confirm(input)
  local m = machine(input.providerid)
  if not m then
    return self:refuse(1, ("fog: no server %s"):format(tostring(input.providerid)))
  end
  self.result.ipaddresses = { access_v4 = m.address, bind_v4 = m.address }
  self.result.hostname = self.task.config.hostname
  self.result.result.ssh_host_keys = { rsa = m.rsa }
  self.result.status = 0
end

function FogProviderAWS:delete(input)
  fs.with_lock("instances.lock", function()
    local inst = instances()
    for host, id in pairs(inst) do
      if id == input.providerid then inst[host] = nil end
    end
    fs.write("instances.json", json.encode(inst))
  end)
  -- An unknown or missing id is already gone: status 0, as fog's DELETE.
  self.result.status = 0
end

FogProviderDigitalOcean = FogProviderAWS
FogProviderGoogle = FogProviderAWS
FogProviderJoyent = FogProviderAWS
FogProviderOpenstack = FogProviderAWS
FogProviderRackspace = FogProviderAWS
