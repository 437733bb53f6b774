-- A small client for Triton's CloudAPI (Joyent's public cloud, and every
-- Triton DataCenter since) on top of loom.http.
--
--   local cloudapi = require("lib.cloudapi")
--   local api = cloudapi.new(fields)                 -- no request yet
--   local resp = api:request("GET", "/machines/" .. id, { retries = 4 })
--   if not resp.ok then error(api:api_error(resp, "reading machine " .. id)) end
--
-- Paths are below the account (/<login>). Requests are signed with the
-- account's SSH key (HTTP Signature: rsa-sha256 or ecdsa-sha256 over the
-- Date header, keyId /<login>/keys/<MD5 fingerprint>), or carry Basic
-- credentials when only a password is given (CloudAPI 7 and older). HTTP
-- error statuses come back as data; network failures raise the binding's
-- error table (kind "connect", "timeout", ...); a throttle that would
-- outlast the hook deadline raises {kind = "joyent", http_status = 429}.

local http = require("loom.http")
local crypto = require("loom.crypto")

local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

local cloudapi = {}

local Client = {}
Client.__index = Client

--- Seconds kept back from the hook deadline for the last request and a
--- clear error.
cloudapi.DEADLINE_MARGIN = 5

-- The most 429 answers one call waits out; each wait is bounded by the
-- hook deadline too.
local MAX_THROTTLED = 8

local IDEMPOTENT = { GET = true, HEAD = true, PUT = true, DELETE = true }

--- Seconds left before the hook deadline, minus the margin (math.huge
--- without a deadline, as in the REPL).
function cloudapi.remaining()
  local r = time and time.remaining()
  if r == nil then return math.huge end
  return r - cloudapi.DEADLINE_MARGIN
end

--- sleep waits within the hook deadline, or raises `why` when it cannot.
function cloudapi.sleep(seconds, why)
  if not time then
    error({ kind = "joyent", message = why .. "; waiting needs the loom.time module, which this loomd does not provide" }, 0)
  end
  if seconds > cloudapi.remaining() then
    error({ kind = "timeout", message = ("%s, and the hook deadline leaves no time to wait %.1fs more"):format(why, seconds) }, 0)
  end
  time.sleep(seconds)
end

local function str(v, default)
  if v == nil then return default or "" end
  local s = tostring(v):match("^%s*(.-)%s*$")
  if s == "" then return default or "" end
  return s
end
cloudapi.str = str

-- der_ecdsa turns a JWS ECDSA signature (r and s, fixed size) into the
-- ASN.1 DER form HTTP Signatures carry (what OpenSSL and node's crypto
-- produce and Triton verifies).
local function der_ecdsa(raw)
  local half = math.floor(#raw / 2)
  local function int(b)
    b = b:gsub("^%z+", "")
    if b == "" then b = "\0" end
    if b:byte(1) >= 0x80 then b = "\0" .. b end
    return "\2" .. string.char(#b) .. b
  end
  local body = int(raw:sub(1, half)) .. int(raw:sub(half + 1))
  if #body < 128 then
    return "\48" .. string.char(#body) .. body
  end
  return "\48\129" .. string.char(#body) .. body
end
cloudapi.der_ecdsa = der_ecdsa

--- Builds a client from the provider's fields: api_user (the account's
--- login), joyent_api_url, joyent_version, and ssh_key_resource (a file of
--- the ssh_keys resource: the key CloudAPI knows, which signs requests)
--- or api_password (Basic, for CloudAPI 7 and older).
function cloudapi.new(f)
  local login = str(f.api_user)
  if login == "" then
    error({ kind = "config", message = "api_user is empty: give the CloudAPI login (the account name)" }, 0)
  end
  local url = str(f.joyent_api_url, "https://us-east-1.api.joyentcloud.com"):gsub("/+$", "")
  if not url:match("^https?://[^/]") then
    error({ kind = "config", message = ("joyent_api_url %q is not an http(s) URL"):format(url) }, 0)
  end
  local c = setmetatable({
    root = url,
    base = url .. "/" .. login,
    login = login,
    version = str(f.joyent_version, "~9"),
    timeout = tonumber(f.api_timeout) or 30,
  }, Client)
  local resource = str(f.ssh_key_resource)
  if resource ~= "" then
    if resource:find("/", 1, true) or resource:find("\\", 1, true) or resource == "." or resource == ".." then
      error({ kind = "config", message = ("ssh_key_resource %q must be a file name in the ssh_keys resource, not a path"):format(resource) }, 0)
    end
    local ok, key = pcall(crypto.key, { resource = "ssh_keys/" .. resource })
    if not ok then
      local msg = type(key) == "table" and key.message or tostring(key)
      error({ kind = "config", message = ("reading the CloudAPI key ssh_keys/%s: %s"):format(resource, msg) }, 0)
    end
    local alg
    if key.type == "rsa" then
      alg = { http = "rsa-sha256", sign = "RS256" }
    elseif key.type == "ecdsa" and key.bits == 256 then
      alg = { http = "ecdsa-sha256", sign = "ES256" }
    elseif key.type == "ecdsa" and key.bits == 384 then
      alg = { http = "ecdsa-sha384", sign = "ES384" }
    elseif key.type == "ecdsa" and key.bits == 521 then
      alg = { http = "ecdsa-sha512", sign = "ES512" }
    else
      error({ kind = "config", message = ("the key ssh_keys/%s is %s: CloudAPI signs with rsa or ecdsa keys"):format(resource, tostring(key.type)) }, 0)
    end
    c.key, c.alg = key, alg
    c.key_id = "/" .. login .. "/keys/" .. key.fingerprint_md5
    c.who = ("%s with key %s"):format(login, key.fingerprint_md5)
  else
    local password = str(f.api_password)
    if password == "" then
      error({ kind = "config", message = "CloudAPI needs a key (ssh_key_resource, with ssh_keypair) or api_password" }, 0)
    end
    c.basic = "Basic " .. crypto.base64_encode(login .. ":" .. password)
    c.who = login .. " (password)"
  end
  return c
end

-- headers builds one attempt's headers: a fresh Date and its signature.
function Client:headers()
  local date = os.date("!%a, %d %b %Y %H:%M:%S GMT")
  local h = { Accept = "application/json", ["Accept-Version"] = self.version, Date = date }
  if self.key then
    local sig = self.key:sign(self.alg.sign, "date: " .. date, "raw")
    if self.alg.http:match("^ecdsa") then sig = der_ecdsa(sig) end
    h.Authorization = ('Signature keyId="%s",algorithm="%s",headers="date",signature="%s"')
      :format(self.key_id, self.alg.http, crypto.base64_encode(sig))
  else
    h.Authorization = self.basic
  end
  return h
end

function Client:send(method, path, opts)
  return pcall(http.request, method, self.base .. path, {
    headers = self:headers(),
    query = opts.query,
    json = opts.json,
    timeout = self.timeout,
    retries = 0,
  })
end

--- request sends method path (below /<login>). opts: query, json,
--- retries (idempotent methods only: more attempts after a 5xx or a lost
--- connection), what (for messages). A 429 is waited out (Retry-After, or
--- a doubling back-off) within the hook deadline.
function Client:request(method, path, opts)
  opts = opts or {}
  local what = opts.what or (method .. " " .. path)
  local failures, throttles = 0, 0
  while true do
    local ok, resp = self:send(method, path, opts)
    if ok and resp.status == 429 then
      throttles = throttles + 1
      local wait = tonumber(resp.headers["retry-after"]) or math.min(2 ^ (throttles - 1), 30)
      if throttles > MAX_THROTTLED or wait > cloudapi.remaining() then
        local err = self:api_error(resp, what)
        err.message = err.message .. ("; CloudAPI throttled %d attempts: run the task again later"):format(throttles)
        err.http_status = 429
        error(err, 0)
      end
      log.warn("%s: HTTP 429 (throttled); retrying in %.1fs", what, wait)
      cloudapi.sleep(wait, what)
    elseif ok and (resp.status < 500 or not IDEMPOTENT[method]) then
      return resp
    else
      local transient = ok or (type(resp) == "table" and (resp.kind == "connect" or resp.kind == "timeout"))
      failures = failures + 1
      if not transient or not IDEMPOTENT[method] or failures > (opts.retries or 0) then
        if ok then return resp end
        if type(resp) == "table" and resp.message then resp.message = what .. ": " .. tostring(resp.message) end
        error(resp, 0)
      end
      local wait = math.min(0.5 * 2 ^ (failures - 1), 10)
      if wait > cloudapi.remaining() then
        if ok then return resp end
        error(resp, 0)
      end
      log.debug("%s: %s; retrying in %.1fs", what, ok and ("HTTP " .. resp.status) or tostring(resp.message), wait)
      cloudapi.sleep(wait, what)
    end
  end
end

--- api_error builds the error table of a failed response with CloudAPI's
--- explanation ({"code": "ResourceNotFound", "message": "..."}).
function Client:api_error(resp, what)
  local ok, doc = pcall(resp.json, resp)
  local code, detail
  if ok and type(doc) == "table" then
    code, detail = doc.code, doc.message
  end
  if detail == nil then
    detail = tostring(resp.body or ""):sub(1, 200):gsub("%s+", " ")
    if detail == "" or detail == " " then detail = "no error message in the response" end
  end
  local msg = ("CloudAPI: %s: HTTP %d%s: %s"):format(what, resp.status, code and (" " .. tostring(code)) or "", tostring(detail))
  local rid = resp.headers["request-id"] or resp.headers["x-request-id"]
  if rid then msg = msg .. (" (request %s)"):format(rid) end
  if resp.status == 401 then
    msg = msg .. ("; check api_user (the account's login) and %s"):format(self.key
      and "the key (ssh_key_resource must hold a private key whose public half is on the account)" or "api_password")
  end
  return { kind = "joyent", message = msg, http_status = resp.status, code = code, request_id = rid }
end

return cloudapi
