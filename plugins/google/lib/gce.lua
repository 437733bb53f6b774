-- A small client for the Compute Engine API v1 on loom.http, with the
-- service-account token of lib/auth.lua.
--
--   local gce = require("lib.gce")
--   local c = gce.new({ project = "p", zone = "us-central1-a", key = key, email = email,
--     api_url = "https://compute.googleapis.com", token_url = "https://oauth2.googleapis.com/token" })
--   local resp, body = c:request("GET", "/instances/web-1")
--
-- Statuses are data (resp.status, and the decoded JSON body); network
-- failures raise the binding's error table. Throttling (429, or 403 with
-- reason rateLimitExceeded / userRateLimitExceeded) is waited out with
-- exponential back-off and jitter, or as Retry-After says, on loom.time's
-- clock within the hook's deadline; 5xx answers and lost connections are
-- sent again a few times; a 401 gets a new token once. Every request the
-- provider sends may be sent again: GET and DELETE are idempotent, an
-- insert carries a requestId.

local http = require("loom.http")
local auth = require("lib.auth")

local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

local gce = {}

--- Seconds kept back from the hook deadline for a clear error.
gce.DEADLINE_MARGIN = 5

local MAX_THROTTLED, MAX_TRANSIENT = 10, 4
local THROTTLE_BASE, TRANSIENT_BASE, MAX_DELAY = 1, 0.5, 32

--- Seconds left before the hook deadline, minus the margin.
function gce.remaining()
  local r = time and time.remaining()
  if r == nil then return math.huge end
  return r - gce.DEADLINE_MARGIN
end

function gce.now()
  return time and time.now() or os.time()
end

local Client = {}
Client.__index = Client

--- Builds a client. opts: project, zone, key (crypto.Key), email,
--- api_url, token_url, timeout (seconds per attempt), poll_interval.
function gce.new(opts)
  local c = setmetatable({}, Client)
  for k, v in pairs(opts) do c[k] = v end
  c.api_url = tostring(opts.api_url or "https://compute.googleapis.com"):gsub("/+$", "")
  c.base = c.api_url .. "/compute/v1/projects/" .. opts.project
  c.timeout = tonumber(opts.timeout) or 30
  c.poll_interval = tonumber(opts.poll_interval) or 5
  if c.poll_interval <= 0 then c.poll_interval = 5 end
  return c
end

function Client:token(force)
  local a = { key = self.key, email = self.email, token_url = self.token_url, timeout = self.timeout }
  if force then auth.forget(a) end
  return auth.token(a)
end

-- reason returns errors[1].reason of a Google error body.
local function reason(body)
  local e = type(body) == "table" and body.error
  if type(e) ~= "table" then return nil end
  local first = type(e.errors) == "table" and e.errors[1]
  return type(first) == "table" and first.reason or e.status
end

local THROTTLE_REASONS = { rateLimitExceeded = true, userRateLimitExceeded = true, RESOURCE_EXHAUSTED = true }

local function backoff(base, n)
  local cap = math.min(MAX_DELAY, base * 2 ^ (n - 1))
  return cap / 2 + math.random() * cap / 2
end

local function decode(resp)
  if resp.body == nil or resp.body == "" then return nil end
  local ok, v = pcall(resp.json, resp)
  if ok then return v end
  return nil
end

--- Sends a request (path relative to the project, "/zones/..."), and
--- returns the response and its decoded JSON body. opts: query, json.
function Client:request(method, path, opts)
  opts = opts or {}
  local throttled, failures, refreshed = 0, 0, false
  while true do
    local ok, resp = pcall(http.request, method, self.base .. path, {
      bearer = self:token(false), query = opts.query, json = opts.json, timeout = self.timeout, retries = 0,
    })
    local body = ok and decode(resp) or nil
    local wait, why
    if ok and resp.status == 401 and not refreshed then
      -- An expired or revoked token: get a new one, once.
      refreshed = true
      self:token(true)
    elseif ok and (resp.status == 429 or (resp.status == 403 and THROTTLE_REASONS[reason(body)])) then
      throttled = throttled + 1
      if throttled > MAX_THROTTLED then return resp, body end
      wait = tonumber(resp.headers["retry-after"]) or backoff(THROTTLE_BASE, throttled)
      why = ("HTTP %d %s (attempt %d)"):format(resp.status, tostring(reason(body)), throttled)
    elseif ok and resp.status < 500 then
      return resp, body
    else
      if not ok and (type(resp) ~= "table" or (resp.kind ~= "connect" and resp.kind ~= "timeout")) then
        error(resp, 0)
      end
      failures = failures + 1
      if failures > MAX_TRANSIENT then
        if ok then return resp, body end
        error(resp, 0)
      end
      wait = ok and tonumber(resp.headers["retry-after"]) or backoff(TRANSIENT_BASE, failures)
      why = ok and ("HTTP " .. resp.status) or tostring(resp.message)
    end
    if wait then
      if not time or wait > gce.remaining() then
        if ok then return resp, body end
        error(resp, 0)
      end
      log.warn("Compute Engine %s %s: %s; sending it again in %.1fs", method, path, why, wait, { wait = wait })
      time.sleep(wait)
    end
  end
end

--- The error table of a failed response: Google's own code, reason and
--- message; `what` says what Loom was doing.
function Client:error(resp, body, what)
  local e = type(body) == "table" and type(body.error) == "table" and body.error or {}
  local msg = e.message
  if msg == nil then
    msg = tostring(resp.body or ""):sub(1, 200):gsub("%s+", " ")
    if msg == "" or msg == " " then msg = "no error message in the answer" end
  end
  local r = reason(body)
  return {
    kind = "google", code = r or ("HTTP" .. resp.status), http_status = resp.status, status = e.status,
    message = ("Compute Engine: %s: HTTP %d%s: %s"):format(what, resp.status, r and (" " .. r) or "", tostring(msg)),
  }
end

--- Waits for a zone operation to be DONE, polling every poll_interval
--- seconds, and returns it. An operation that failed raises its error
--- ({kind = "google", code = errors[1].code, http_status}); one the hook's
--- deadline does not leave time to wait for raises a timeout naming it.
function Client:wait(op, what)
  while op.status ~= "DONE" do
    if not time or self.poll_interval > gce.remaining() then
      error({ kind = "timeout", message = ("Compute Engine: %s: operation %s is still %s and the hook deadline leaves no time to wait (raise the plugin's timeouts)")
        :format(what, tostring(op.name), tostring(op.status)) }, 0)
    end
    time.sleep(self.poll_interval)
    local resp, body = self:request("GET", "/zones/" .. self.zone .. "/operations/" .. op.name)
    if resp.status ~= 200 then
      error(self:error(resp, body, what .. ": reading operation " .. tostring(op.name)), 0)
    end
    op = body
  end
  if type(op.error) == "table" and type(op.error.errors) == "table" and op.error.errors[1] then
    local e = op.error.errors[1]
    error({
      kind = "google", code = e.code, http_status = op.httpErrorStatusCode, operation = op.name,
      message = ("Compute Engine: %s: operation %s failed: %s: %s"):format(what, tostring(op.name), tostring(e.code), tostring(e.message)),
    }, 0)
  end
  return op
end

return gce
