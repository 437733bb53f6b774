-- The rate-limit budget of one DigitalOcean account, shared by every task
-- that uses it.
--
-- DigitalOcean limits each token (5,000 requests an hour, 250 a minute,
-- and 10 key listings a minute on GET /v2/account/keys) and reports where
-- it stands in the ratelimit-* headers of every response; a 429 says how
-- long to wait in retry-after. Tasks of one cluster run at once, in
-- different pooled VMs and, under loomd serve, in different worker
-- processes, so what one of them learns must reach the others before they
-- spend requests that will only be refused.
--
-- The state lives in a small JSON file in the plugin's work dir
-- (state/digitalocean-<account>/limits.json: the tenant's own, so tenants
-- never share it), read without a lock (loom.fs writes atomically) and
-- changed under loom.fs.with_lock, which works across processes.
--
--   local limits = require("lib.limits")
--   local budget = limits.new(limits.account(root, token), clock)
--   budget:wait_turn("GET", "/account/keys")   -- before sending
--   budget:observe("GET", "/account/keys", resp) -- after the response

local json = require("loom.json")
local fs = require("loom.fs")

local limits = {}

local Budget = {}
Budget.__index = Budget

-- Endpoints with limits of their own, besides the account-wide ones. A
-- request to one of them reserves a slot in its window before it is sent.
limits.ENDPOINTS = {
  { bucket = "account_keys", method = "GET", pattern = "^/account/keys$", limit = 10, per = 60,
    what = "GET /v2/account/keys (listing SSH keys)" },
}

-- The shared file is written only once ratelimit-remaining is this low
-- (or was, to clear it): a request with quota to spare costs one read.
local WRITE_BELOW = 25

-- With ratelimit-remaining at 0 after a success, requests wait until
-- ratelimit-reset, but at most this long after it was seen: a 0 can also
-- mean the per-minute burst limit, and the next 429 then says precisely
-- how long to wait.
local ZERO_REMAINING_WAIT = 60

--- Returns a digest naming an account (API root and token) in file names
--- and caches, so that the token itself is never written down. Two 32-bit
--- string hashes (djb2 and sdbm); exact in Lua's doubles.
function limits.account(root, token)
  local s = tostring(root) .. "\n" .. tostring(token or "")
  local a, b = 5381, 0
  for i = 1, #s do
    local c = s:byte(i)
    a = (a * 33 + c) % 4294967296
    b = (c + b * 65599) % 4294967296
  end
  return ("%08x%08x"):format(a, b)
end

--- Returns the budget of account. clock has now() (seconds),
--- remaining() (seconds the hook may still wait) and sleep(seconds), the
--- latter nil when the host cannot wait.
function limits.new(account, clock)
  return setmetatable({
    account = account,
    clock = clock,
    dir = "state/digitalocean-" .. account,
  }, Budget)
end

local function endpoint(method, path)
  for _, e in ipairs(limits.ENDPOINTS) do
    if e.method == method and path:match(e.pattern) then return e end
  end
  return nil
end

-- load returns the JSON document name (a file name without extension) of
-- the account's dir; a missing, torn or foreign file is an empty document
-- (no reason to fail a task), never an error.
function Budget:load(name)
  local ok, doc = pcall(function()
    local p = self.dir .. "/" .. name .. ".json"
    if not fs.exists(p) then return {} end
    return json.decode(fs.read(p))
  end)
  if not ok or type(doc) ~= "table" then return {} end
  return doc
end

-- read returns the shared rate-limit state.
function Budget:read()
  return self:load("limits")
end

-- unshared says, once per budget, that the shared state cannot be used:
-- the task goes on, only without what other tasks learnt.
function Budget:unshared(err)
  if self.warned then return end
  self.warned = true
  log.warn("the DigitalOcean rate-limit state in %s/ cannot be shared with other tasks (%s): going on without it",
    self.dir, type(err) == "table" and tostring(err.message) or tostring(err))
end

-- locked runs fn under the lock file name in the account's dir and
-- returns its result. An error fn raises is raised again; when the lock
-- itself fails (a read-only or full work dir), fn runs unlocked, with a
-- warning: the shared state is an optimisation, never a reason to fail a
-- task. Waiting for the lock past the deadline raises its timeout.
function Budget:locked(name, fn)
  local failed
  local ok, res = pcall(fs.with_lock, self.dir .. "/" .. name .. ".lock", function()
    local fok, r = pcall(fn)
    if not fok then
      failed = { r }
      return nil
    end
    return r
  end)
  if failed then error(failed[1], 0) end
  if ok then return res end
  if type(res) == "table" and res.kind == "timeout" then error(res, 0) end
  self:unshared(res)
  return fn()
end

-- save writes a JSON document of the account's dir; failing is a warning.
function Budget:save(name, doc)
  local ok, err = pcall(fs.write, self.dir .. "/" .. name .. ".json", json.encode(doc))
  if not ok then self:unshared(err) end
end

-- update runs fn(state) under the account's lock, saves the state and
-- returns fn's result.
function Budget:update(fn)
  return self:locked("limits", function()
    local st = self:read()
    local r = fn(st)
    self:save("limits", st)
    return r
  end)
end

local function field(st, k)
  if type(st[k]) ~= "table" then st[k] = {} end
  return st[k]
end

-- reserve takes a slot in endpoint e's window, or returns how long until
-- one frees.
function Budget:reserve(e, now)
  return self:update(function(st)
    local calls = field(st, "calls")
    local kept = {}
    for _, t in ipairs(type(calls[e.bucket]) == "table" and calls[e.bucket] or {}) do
      t = tonumber(t)
      if t and t > now - e.per and t <= now + e.per then kept[#kept + 1] = t end
    end
    table.sort(kept)
    if #kept >= e.limit then
      calls[e.bucket] = kept
      return kept[#kept - e.limit + 1] + e.per - now
    end
    kept[#kept + 1] = now
    calls[e.bucket] = kept
    return 0
  end)
end

-- delay returns how long the account's state says to hold a request back,
-- and why.
function Budget:delay(st, e, now)
  local wait, why = 0, nil
  local blocked = type(st.blocked) == "table" and st.blocked or {}
  local function consider(w, reason)
    if w and w > wait then wait, why = w, reason end
  end
  local all = tonumber(blocked["*"])
  consider(all and all - now, "DigitalOcean answered 429 (too many requests) and asked to wait")
  if e then
    local b = tonumber(blocked[e.bucket])
    consider(b and b - now, ("DigitalOcean answered 429 to %s, which allows %d requests per %ds")
      :format(e.what, e.limit, e.per))
  end
  local rem, reset, seen = tonumber(st.remaining), tonumber(st.reset), tonumber(st.observed)
  if rem and reset and rem <= 0 and reset > now then
    local until_t = math.min(reset, (seen or now) + ZERO_REMAINING_WAIT)
    consider(until_t - now, ("the account's request quota is used up (ratelimit-remaining 0 of %s, ratelimit-reset %s)")
      :format(tostring(st.limit or "?"), os.date("!%Y-%m-%dT%H:%M:%SZ", math.floor(reset))))
  end
  return wait, why
end

--- Waits until the account's budget allows method path: a 429's
--- retry-after, an exhausted quota, the endpoint's own window. A wait
--- longer than the hook deadline allows raises a "digitalocean" error
--- (http_status 429, retry_after) at once instead of sleeping into it.
function Budget:wait_turn(method, path)
  local e = endpoint(method, path)
  local told = false
  while true do
    local now = self.clock.now()
    local wait, why = self:delay(self:read(), e, now)
    if wait <= 0 and e then
      wait = self:reserve(e, now)
      if wait > 0 then
        why = ("%s allows %d requests per %ds, and tasks of this account have used them")
          :format(e.what, e.limit, e.per)
      end
    end
    if wait <= 0 then return end
    local left = self.clock.remaining()
    if not self.clock.sleep or wait > left then
      error({
        kind = "digitalocean",
        http_status = 429,
        retry_after = math.ceil(wait),
        message = ("DigitalOcean API rate limit: %s; the next %s %s may be sent in %ds, later than this hook's deadline allows (%s): run the task again later, or run fewer tasks against this account at once")
          :format(why, method, path, math.ceil(wait),
            self.clock.sleep and ("%ds left"):format(math.max(0, math.floor(left))) or "this loomd has no loom.time to wait with"),
      }, 0)
    end
    if not told then
      told = true
      log.info("waiting %.1fs before %s %s: %s", wait, method, path, why,
        { rate_limit_wait = wait })
    end
    self.clock.sleep(wait)
  end
end

--- Records what a response says about the account's budget: a 429 blocks
--- the account (or, for an endpoint with its own limit and quota left,
--- that endpoint) for retry-after seconds, else until ratelimit-reset; a
--- low ratelimit-remaining is shared so that other tasks hold back.
function Budget:observe(method, path, resp)
  local h = resp.headers or {}
  local rem, lim, reset = tonumber(h["ratelimit-remaining"]), tonumber(h["ratelimit-limit"]), tonumber(h["ratelimit-reset"])
  local now = self.clock.now()
  if resp.status == 429 then
    local e = endpoint(method, path)
    local after = tonumber(h["retry-after"])
    if after == nil then
      -- No retry-after: the hourly quota, free again as its oldest
      -- request expires (ratelimit-reset).
      after = (reset and reset > now) and (reset - now) or 1
    end
    after = math.max(after, 0)
    local bucket = (e and (rem == nil or rem > 0)) and e.bucket or "*"
    self:update(function(st)
      local blocked = field(st, "blocked")
      blocked[bucket] = math.max(tonumber(blocked[bucket]) or 0, now + after)
    end)
    return
  end
  if rem == nil then return end
  local stored = tonumber(self:read().remaining)
  if rem <= WRITE_BELOW or (stored and stored <= WRITE_BELOW) then
    self:update(function(st)
      st.remaining, st.limit, st.reset, st.observed = rem, lim, reset, now
    end)
  end
end

--- Runs fn(doc) on a JSON document kept beside the account's budget (the
--- caches of lib/api.lua), under its own lock, and returns fn's first
--- result; the document is saved when fn returns true as its second.
--- name is a file name without extension.
function Budget:with_doc(name, fn)
  return self:locked(name, function()
    local doc = self:load(name)
    local r, changed = fn(doc)
    if changed then self:save(name, doc) end
    return r
  end)
end

return limits
