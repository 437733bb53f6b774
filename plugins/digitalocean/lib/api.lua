-- A small client for the DigitalOcean API v2 on top of loom.http.
--
--   local api = require("lib.api")
--   local client = api.new({ url = fields.api_url, token = fields.api_token })
--   local resp = client:request("GET", "/droplets/123", { retries = 4 })
--   if not resp.ok then error(client:api_error(resp, "reading droplet 123")) end
--
-- HTTP error statuses come back as data (resp.status) so the hooks can
-- decide what a 404 or a 401 means for them; network failures raise the
-- binding's error table (kind "connect", "timeout", "permission").

local http = require("loom.http")

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

--- Builds a client. opts.url is the API root without /v2 (default
--- https://api.digitalocean.com), opts.token the bearer token, and
--- opts.timeout the per-attempt timeout in seconds (default 30: one slow
--- call should not use up the whole hook deadline).
function api.new(opts)
  local root = tostring(opts.url or "https://api.digitalocean.com"):gsub("/+$", "")
  return setmetatable({
    base = root .. "/v2",
    token = opts.token,
    timeout = tonumber(opts.timeout) or 30,
    quota_warned = false,
  }, Client)
end

--- Sends one request and returns the binding's response table.
--- opts: query, json, retries. Retries cover connection errors, 429 (with
--- Retry-After) and 5xx, and the binding applies them to idempotent methods
--- only (GET, DELETE), which is exactly what is safe to repeat here.
function Client:request(method, path, opts)
  opts = opts or {}
  local resp = http.request(method, self.base .. path, {
    bearer = self.token,
    headers = { Accept = "application/json" },
    query = opts.query,
    json = opts.json,
    timeout = self.timeout,
    retries = opts.retries or 0,
    -- DigitalOcean's per-minute window resets within a minute; waiting
    -- that long is better than failing a cluster.
    retry_max_delay = 60,
  })
  self:watch_quota(resp)
  return resp
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

return api
