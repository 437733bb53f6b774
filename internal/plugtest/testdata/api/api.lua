-- A small provider for the plugtest tests: one POST on CREATE, a GET on
-- CONFIRM, a DELETE on DELETE.
local http = require("loom.http")
local fs = require("loom.fs")
Api = require("loom").Provider:extend("Api")

local function call(f, method, path, opts)
  opts = opts or {}
  opts.bearer = f.token
  opts.retries = 2
  opts.retry_delay = 0.001
  opts.timeout = 0.3
  return http.request(method, f.url .. path, opts)
end

function Api:create(input)
  local r = call(input.fields, "PUT", "/things/" .. input.hostname, { json = { flavor = input.flavor } })
  if r.status ~= 200 then error({ kind = "api", message = "PUT returned " .. r.status }) end
  fs.write("made-" .. input.hostname, "x")
  self.result.result.providerid = r:json().id
  self.result.result["ssh-auth"] = { user = "admin" }
  self.result.status = 0
end

function Api:confirm(input)
  local r = call(input.fields, "GET", "/things/" .. input.providerid)
  self.result.ipaddresses = { access_v4 = r:json().ip }
  self.result.hostname = "confirmed.example.com"
  self.result.status = 0
end

function Api:delete(input)
  call(input.fields, "DELETE", "/things/" .. input.providerid)
  fs.remove("made-" .. self.task.config.hostname)
  self.result.status = 0
end
