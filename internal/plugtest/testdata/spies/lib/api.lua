-- A plugin module: the hooks call it, tests stub it.
local http = require("loom.http")

local api = {}

api.calls = 0

function api.request(fields, method, path, body)
  api.calls = api.calls + 1
  local resp = http.request(method, fields.api_url .. path, { bearer = fields.token, json = body, retries = 3 })
  if resp.status >= 400 then
    error({ kind = "api", status = resp.status, message = ("%s %s: HTTP %d"):format(method, path, resp.status) }, 0)
  end
  if resp.body == "" then return {} end
  return resp:json()
end

function api.label(name)
  return "loom-" .. name
end

return api
