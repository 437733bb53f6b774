-- kloudlike: a Koding Kloud provider. The stack part turns a user's
-- Terraform template into one for the cloud: every kloudlike_instance
-- gets the credential's bootstrap outputs (its network) and a default
-- size. Kloud's host (adapters/kloud) then adds what every kloud
-- provider gets: each machine's Klient cloud-init and kite key, and the
-- credential's secret variables shadowed in the resources. The machine
-- part starts, stops and inspects machines through the cloud's API.
--
-- credential: {api_url, token (secret)}; bootstrap: {network_id};
-- machine metadata: {id, size}, read from the instance's Terraform
-- attributes after apply.
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
    metadata = {
      { name = "id", type = "string", label = "Machine id", read_only = true, attribute = "id" },
      { name = "size", type = "string", label = "Size", read_only = true },
    },
  }
end

function KloudLike:valid_credential(req)
  local c = req.value
  if (c.api_url or "") == "" or (c.token or "") == "" then return nil, "api_url and token are required" end
end

function KloudLike:valid_bootstrap(req)
  if (req.value.network_id or "") == "" then return nil, "bootstrap has no network_id: run bootstrap first" end
end

function KloudLike:valid_metadata(req)
  local id = req.value.id
  if id ~= nil and id ~= "" and not id:match("^m%-%d+$") then return nil, "machine id " .. id .. " is not a kloudlike id (m-N)" end
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
  -- kloud injects the credential as variables (kloudlike_api_url,
  -- kloudlike_token) before it applies the template.
  return { { content = json.encode({
    provider = { kloudlike = { api_url = "${var.kloudlike_api_url}", token = "${var.kloudlike_token}" } },
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
  for _, inst in pairs(instances) do
    inst.network_id = boot.network_id
    if (inst.size or "") == "" then inst.size = "small" end
    -- The host wraps inst.user_data (the user's script) in Klient's
    -- cloud-init after this hook.
  end
  -- The provider block may read the credential: kloud injects it as the
  -- variables kloudlike_api_url and kloudlike_token.
  tpl.provider = { kloudlike = { api_url = "${var.kloudlike_api_url}", token = "${var.kloudlike_token}" } }
  return { key = req.template.key, content = json.encode(tpl) }
end

local states = { running = "Running", stopped = "Stopped", starting = "Starting", stopping = "Stopping", pending = "Pending" }

function KloudLike:info(req)
  local id = req.metadata and req.metadata.id or ""
  if id == "" then return { state = "NotInitialized" } end
  local m = api(req.credential.credential, "GET", "/machines/" .. id)
  if not m then return nil, { not_found = true, code = 106, message = "machine " .. id .. " not found" } end
  return { state = states[m.state] or "Unknown", metadata = { ip = m.ip } }
end

local function action(req, verb)
  local id = req.metadata and req.metadata.id or ""
  if id == "" then return nil, { class = "terminal", message = "the machine has no id in its metadata" } end
  local m = api(req.credential.credential, "POST", "/machines/" .. id .. "/" .. verb, {})
  if not m then return nil, { not_found = true, code = 106, message = "machine " .. id .. " not found" } end
  return { ip = m.ip }
end

function KloudLike:start(req) return action(req, "start") end
function KloudLike:stop(req) return action(req, "stop") end

return KloudLike
