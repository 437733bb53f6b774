-- kloudlike: a Koding Kloud provider. The stack part turns a user's
-- Terraform template into one that uses the credential's bootstrap outputs
-- (a network id) and installs the agent through user data; the machine
-- part starts, stops and inspects machines through the cloud's API.
--
-- credential: {api_url, token (secret)}; bootstrap: {network_id}.
local loom = require("loom")
local http = require("loom.http")
local json = require("loom.json")

local KloudLike = loom.KloudProvider:extend("KloudLike")

function KloudLike:schema()
  return {
    credential = {
      { name = "api_url", type = "string", label = "API URL" },
      { name = "token", type = "string", label = "Token", secret = true },
    },
    bootstrap = { { name = "network_id", type = "string", label = "Network", read_only = true } },
    metadata = { { name = "id", type = "string", label = "Machine id", read_only = true } },
  }
end

function KloudLike:valid_credential(req)
  local c = req.value
  if (c.api_url or "") == "" or (c.token or "") == "" then return nil, "api_url and token are required" end
end

function KloudLike:valid_bootstrap(req)
  if (req.value.network_id or "") == "" then return nil, "bootstrap has no network_id: run bootstrap first" end
end

local function api(cred, method, path, body)
  local resp = http.request(method, cred.api_url .. path, { bearer = cred.token, json = body })
  if resp.status == 404 then return nil, 404 end
  if not resp.ok then error({ code = resp.status == 401 and 414 or nil, message = ("%s %s: %d"):format(method, path, resp.status) }) end
  return resp:json(), resp.status
end

function KloudLike:verify_credential(req)
  local who = api(req.credential.credential, "GET", "/whoami")
  if not who or not who.user then return nil, "the token belongs to no user" end
end

function KloudLike:bootstrap_templates(req)
  return { { key = "kloudlike-network", content = json.encode({
    resource = { kloudlike_network = { main = { cidr = "10.10.0.0/16" } } },
    output = { network_id = { value = "${kloudlike_network.main.id}" } },
  }) } }
end

function KloudLike:apply_template(req)
  local boot = req.credential.bootstrap or {}
  if (boot.network_id or "") == "" then
    return nil, { class = "terminal", code = 414, message = "the credential is not bootstrapped (no network_id)" }
  end
  local tpl = json.decode(req.template.content)
  local instances = tpl.resource and tpl.resource.kloudlike_instance or {}
  for label, inst in pairs(instances) do
    inst.network_id = boot.network_id
    inst.user_data = "#cloud-config\nruncmd:\n  - [install-klient, --label, " .. label .. "]\n" .. (inst.user_data or "")
  end
  -- Secrets never travel in the template: the token is a variable.
  tpl.provider = { kloudlike = { api_url = req.credential.credential.api_url, token = "${var.kloudlike_token}" } }
  return { key = req.template.key or ((req.group or "default") .. "-" .. (req.stack_id or "stack")), content = json.encode(tpl) }
end

local states = { running = "Running", stopped = "Stopped", starting = "Starting", stopping = "Stopping", pending = "Pending" }

function KloudLike:info(req)
  local id = req.metadata and req.metadata.id
  if not id then return { state = "NotInitialized" } end
  local m = api(req.credential.credential, "GET", "/machines/" .. id)
  if not m then return nil, { not_found = true, code = 106, message = "machine " .. id .. " not found" } end
  return { state = states[m.state] or "Unknown", metadata = { ip = m.ip } }
end

local function action(req, verb)
  local id = req.metadata and req.metadata.id
  if not id then return nil, { class = "terminal", message = "the machine has no id in its metadata" } end
  local m = api(req.credential.credential, "POST", "/machines/" .. id .. "/" .. verb, {})
  if not m then return nil, { not_found = true, code = 106, message = "machine " .. id .. " not found" } end
  return { ip = m.ip }
end

function KloudLike:start(req) return action(req, "start") end
function KloudLike:stop(req) return action(req, "stop") end

return KloudLike
