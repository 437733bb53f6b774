-- A small client for the DigitalOcean API v2 on top of loom.http.
--
--   local api = require("lib.api")
--   local client = api.new({ url = fields.api_url, token = fields.api_token })
--   local resp = client:request("GET", "/droplets/123", { retries = 4 })
--   if not resp.ok then error(client:api_error(resp, "reading droplet 123")) end
--
-- HTTP error statuses come back as data (resp.status) so the hooks can
-- decide what a 404 or a 401 means for them; network failures raise the
-- binding's error table (kind "connect", "timeout", "permission"), and a
-- rate limit that would outlast the hook deadline raises a "digitalocean"
-- error with http_status 429 (lib/limits.lua).
--
-- Every request goes through the account's shared rate-limit budget
-- (lib/limits.lua), and the account's SSH keys are cached
-- (Client:account_keys).

local http = require("loom.http")
local limits = require("lib.limits")

-- loom.time gives sub-second clocks and waits bounded by the hook
-- deadline; without it (an old host) the client cannot wait out a rate
-- limit and says so.
local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

local api = {}

local Client = {}
Client.__index = Client

-- Below this share of the hourly quota left, say so in the logs: the next
-- cluster may hit 429s, and an operator should know why it slowed down.
local LOW_QUOTA_SHARE = 0.1

-- DigitalOcean caps per_page at 200; fewer pages means fewer requests
-- against the quota.
local PER_PAGE = 200

-- A paginated listing longer than this is a bug (or a huge account), not
-- something to walk for the rest of the hook's deadline.
local MAX_PAGES = 50

-- Seconds kept back from the hook deadline: a wait never eats the time the
-- hook needs to report a clear error before the runtime's timeout fires.
api.DEADLINE_MARGIN = 5

-- The most times one call is sent again after a 429 (the request was not
-- processed, so any method may be repeated). Each wait is bounded by the
-- hook deadline; this only stops a server that answers 429 forever.
local MAX_429_RETRIES = 8

local IDEMPOTENT = { GET = true, HEAD = true, PUT = true, DELETE = true, OPTIONS = true }

--- Returns the seconds left before the hook deadline, minus the margin
--- (math.huge when the hook has no deadline, as in the REPL).
function api.remaining()
  local r = time and time.remaining()
  if r == nil then return math.huge end
  return r - api.DEADLINE_MARGIN
end

--- The wall clock in seconds, with sub-second precision when loom.time is
--- there.
function api.now()
  return time and time.now() or os.time()
end

--- Builds a client. opts.url is the API root without /v2 (default
--- https://api.digitalocean.com), opts.token the bearer token, and
--- opts.timeout the per-attempt timeout in seconds (default 30: one slow
--- call should not use up the whole hook deadline).
function api.new(opts)
  local root = tostring(opts.url or "https://api.digitalocean.com"):gsub("/+$", "")
  local c = setmetatable({
    base = root .. "/v2",
    token = opts.token,
    timeout = tonumber(opts.timeout) or 30,
    quota_warned = false,
  }, Client)
  -- The account (API root and token) names the shared rate-limit state
  -- and caches; a digest, so the token itself is never written down.
  c.account = limits.account(root, opts.token)
  c.limits = limits.new(c.account, { now = api.now, remaining = api.remaining, sleep = time and time.sleep })
  return c
end

-- send is one attempt: the binding's response, or its error table.
function Client:send(method, path, opts)
  return pcall(http.request, method, self.base .. path, {
    bearer = self.token,
    headers = { Accept = "application/json" },
    query = opts.query,
    json = opts.json,
    timeout = self.timeout,
    -- Retries are this client's: it shares what a 429 or the quota
    -- headers say with every other task of this account.
    retries = 0,
  })
end

--- Sends one request and returns the binding's response table.
--- opts: query, json, retries (default 0).
---
--- Before each attempt the client waits its turn in the account's shared
--- rate-limit budget (lib/limits.lua): a 429's retry-after, an exhausted
--- ratelimit-remaining until ratelimit-reset, and per-endpoint limits
--- (10 key listings a minute). Waits are bounded by the hook deadline; a
--- wait that would pass it raises a "digitalocean" error with http_status
--- 429 instead. A 429 is always tried again (DigitalOcean did not process
--- the request). opts.retries more attempts cover 5xx and lost
--- connections, for idempotent methods only: a POST that may have
--- reached the server is the caller's to check.
function Client:request(method, path, opts)
  opts = opts or {}
  local retries = opts.retries or 0
  local failures, throttled = 0, 0
  while true do
    self.limits:wait_turn(method, path)
    local ok, resp = self:send(method, path, opts)
    if ok then
      self.limits:observe(method, path, resp)
      self:watch_quota(resp)
    end
    if ok and resp.status == 429 then
      throttled = throttled + 1
      if throttled > MAX_429_RETRIES then
        return resp
      end
      log.warn("DigitalOcean API: %s %s: HTTP 429 (rate limited); retrying when the limit allows",
        method, path)
    elseif ok and (resp.status < 500 or not IDEMPOTENT[method]) then
      return resp
    else
      -- A 5xx or a broken connection: the request may have been done. Only
      -- an idempotent method is safe to send again; a POST is the caller's
      -- to check (CREATE looks its node tag up first).
      local transient = ok or (type(resp) == "table" and (resp.kind == "connect" or resp.kind == "timeout"))
      if not transient or not IDEMPOTENT[method] then
        if ok then return resp end
        error(resp, 0)
      end
      failures = failures + 1
      if failures > retries then
        if ok then return resp end
        error(resp, 0)
      end
      local wait = ok and tonumber(resp.headers["retry-after"]) or math.min(0.5 * 2 ^ (failures - 1), 30)
      local why = ok and ("HTTP " .. resp.status) or tostring(resp.message)
      if wait > api.remaining() or not time then
        if ok then return resp end
        error(resp, 0)
      end
      log.debug("DigitalOcean API: %s %s: %s; retrying in %.1fs", method, path, why, wait)
      time.sleep(wait)
    end
  end
end

-- watch_quota logs (once per client) when the hourly request quota runs
-- low, from DigitalOcean's ratelimit-* headers.
function Client:watch_quota(resp)
  local limit = tonumber(resp.headers["ratelimit-limit"])
  local remaining = tonumber(resp.headers["ratelimit-remaining"])
  if not limit or not remaining or limit <= 0 then
    return
  end
  if remaining < limit * LOW_QUOTA_SHARE and not self.quota_warned then
    self.quota_warned = true
    local reset = tonumber(resp.headers["ratelimit-reset"])
    log.warn("DigitalOcean API quota low: %d of %d requests left (resets at %s)",
      remaining, limit, reset and os.date("!%Y-%m-%dT%H:%M:%SZ", reset) or "an unknown time",
      { ratelimit_remaining = remaining, ratelimit_limit = limit })
  end
end

--- Builds the error table for a failed response, carrying DigitalOcean's
--- own explanation: its error bodies are {"id": "...", "message": "...",
--- "request_id": "..."}. `what` says what Loom was doing.
function Client:api_error(resp, what)
  local ok, body = pcall(resp.json, resp)
  local id, detail, request_id
  if ok and type(body) == "table" then
    id, detail, request_id = body.id, body.message, body.request_id
  end
  if detail == nil then
    -- Not DigitalOcean's JSON (a proxy's HTML page, say): show its start.
    detail = tostring(resp.body or ""):sub(1, 200):gsub("%s+", " ")
    if detail == "" or detail == " " then detail = "no error message in the response" end
  end
  local msg = ("DigitalOcean API: %s: HTTP %d%s: %s"):format(
    what, resp.status, id and (" " .. tostring(id)) or "", tostring(detail))
  if request_id then
    msg = msg .. (" (request %s)"):format(tostring(request_id))
  end
  return {
    kind = "digitalocean",
    message = msg,
    http_status = resp.status,
    id = id,
    request_id = request_id,
  }
end

--- Returns every item of a paginated listing: the `key` array of each page
--- of GET path, following links.pages.next.
function Client:list(path, key, query, what)
  local items = {}
  local q = {}
  for k, v in pairs(query or {}) do q[k] = v end
  q.per_page = PER_PAGE
  for page = 1, MAX_PAGES do
    q.page = page
    local resp = self:request("GET", path, { query = q, retries = 4 })
    if resp.status == 429 then
      -- The client gave up on the 429s: say what the limit costs.
      local err = self:api_error(resp, what)
      err.message = err.message .. "; DigitalOcean keeps answering 429 (rate limited): run the task again later"
      error(err, 0)
    end
    if not resp.ok then
      error(self:api_error(resp, what), 0)
    end
    local body = resp:json() or {}
    for _, item in ipairs(body[key] or {}) do
      items[#items + 1] = item
    end
    local pages = body.links and body.links.pages
    if not (pages and pages.next) then
      return items
    end
  end
  log.warn("%s: stopped after %d pages of %d", what, MAX_PAGES, PER_PAGE)
  return items
end

-- Account keys ------------------------------------------------------------

-- Per VM (module state lives as long as the pooled VM, which only ever
-- serves one tenant): account digest -> {keys = {...}, fetched = seconds}.
local key_cache = {}

-- How long a listing of the account's SSH keys is used before it is
-- listed again. Keys change rarely; a CREATE naming a key the listing
-- lacks lists again (MISS_RELIST_AFTER), so a new key is seen at once.
api.KEYS_TTL = 300

-- A listing younger than this is trusted even when it lacks a key: tasks
-- failing over a misspelt key name must not spend the 10-a-minute budget.
api.MISS_RELIST_AFTER = 10

local function fresh(entry, now, ttl)
  local t = entry and tonumber(entry.fetched)
  return t ~= nil and type(entry.keys) == "table" and t <= now + 1 and now - t < ttl
end

--- Returns the account's SSH keys ({id, name, fingerprint} each) and
--- where they came from ("vm", "shared" or "api"). GET /v2/account/keys
--- allows 10 requests a minute per token, so a listing is kept in this VM
--- and in the account's shared state (lib/limits.lua) for KEYS_TTL
--- seconds, and concurrent tasks wait for the one listing in progress
--- instead of each listing. has(keys) says whether a listing holds what
--- the caller needs; one that does not is refreshed once it is older than
--- MISS_RELIST_AFTER seconds.
function Client:account_keys(has)
  local now = api.now()
  local mem = key_cache[self.account]
  if fresh(mem, now, api.KEYS_TTL) and (has(mem.keys) or fresh(mem, now, api.MISS_RELIST_AFTER)) then
    return mem.keys, "vm"
  end
  local got = self.limits:with_doc("account_keys", function(doc)
    local t = api.now()
    if fresh(doc, t, api.KEYS_TTL) and (has(doc.keys) or fresh(doc, t, api.MISS_RELIST_AFTER)) then
      return { keys = doc.keys, fetched = tonumber(doc.fetched), from = "shared" }
    end
    local listed = self:list("/account/keys", "ssh_keys", nil, "listing the account's SSH keys")
    local keys = {}
    for _, k in ipairs(listed) do
      -- Only what CREATE uses: public key material stays out of the file.
      keys[#keys + 1] = { id = k.id, name = k.name, fingerprint = k.fingerprint }
    end
    doc.keys, doc.fetched = keys, api.now()
    return { keys = keys, fetched = doc.fetched, from = "api" }, true
  end)
  key_cache[self.account] = { keys = got.keys, fetched = got.fetched }
  return got.keys, got.from
end

--- Forgets the account's cached SSH keys, here and in the shared state
--- (DigitalOcean refused a fingerprint that the cache still had).
function Client:forget_keys()
  key_cache[self.account] = nil
  self.limits:with_doc("account_keys", function(doc)
    doc.keys, doc.fetched = nil, nil
    return nil, true
  end)
end

return api
