-- A small client of Linode's API v4 (https://techdocs.akamai.com/linode-api):
-- the calls the provider makes, and the API's error shape turned into a
-- task error. Tests stub and spy on it (linode_test.lua).
local http = require("loom.http")
local json = require("loom.json")

local client = {}

-- request sends one call and returns the decoded body and the status. A
-- 404 of a GET or DELETE comes back as nil, 404 (the caller decides what
-- a missing instance means); any other status outside 2xx raises an
-- error table {kind = "api", status, message} with Linode's reasons.
function client.request(fields, method, path, body, headers)
  local resp = http.request(method, fields.api_url .. path, {
    bearer = fields.api_token, -- never logged: the field is sensitive
    json = body,
    headers = headers,
    timeout = 30,
    retries = 3, -- connection errors, 429 (Retry-After) and 5xx; GET, PUT and DELETE only
  })
  if resp.status == 404 and method ~= "POST" then
    return nil, 404
  end
  if resp.status < 200 or resp.status > 299 then
    local reasons = {}
    local ok, decoded = pcall(resp.json, resp)
    if ok and type(decoded) == "table" and type(decoded.errors) == "table" then
      for _, e in ipairs(decoded.errors) do
        reasons[#reasons + 1] = e.field and (e.field .. ": " .. tostring(e.reason)) or tostring(e.reason)
      end
    end
    local why = #reasons > 0 and table.concat(reasons, "; ") or resp.body
    error({ kind = "api", status = resp.status,
      message = ("Linode: %s %s: HTTP %d: %s"):format(method, path, resp.status, why) }, 0)
  end
  if resp.body == "" then return {}, resp.status end
  return resp:json(), resp.status
end

-- list returns the instances whose label is label, or contains it with
-- contains = true (one page of up to 500: enough for a cluster's nodes).
function client.list(fields, label, contains)
  local filter = { label = label }
  if contains then filter = { label = { ["+contains"] = label } } end
  local page = client.request(fields, "GET", "/linode/instances?page_size=500", nil,
    { ["X-Filter"] = json.encode(filter) })
  return page.data or {}
end

-- find returns the instance labelled label, or nil.
function client.find(fields, label)
  return client.list(fields, label)[1]
end

-- label turns a node's hostname into a Linode label: letters, digits,
-- - _ and ., starting and ending with a letter or digit, at most 64
-- characters, no two of - _ . in a row.
function client.label(hostname)
  local l = hostname:gsub("[^%w%._%-]", "-"):gsub("([%-_%.])[%-_%.]+", "%1")
  l = l:gsub("^[^%w]+", ""):sub(1, 64):gsub("[^%w]+$", "")
  if #l < 3 then l = ("node-" .. l):sub(1, 64) end
  return l
end

return client
