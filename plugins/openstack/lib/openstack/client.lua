-- A small OpenStack client on top of loom.http: Keystone v3 tokens (password
-- or application credential) or Rackspace's identity service (Keystone
-- v2.0 with an API key), the service catalog, and requests to the services
-- it lists (Nova, Neutron, Glance) with OpenStack's error shapes,
-- throttling and retries.
--
--   local client = require("lib.openstack.client")
--   local os_api = client.new(fields)          -- no request yet
--   local resp = os_api:request("compute", "GET", "/servers/" .. id, { retries = 4 })
--   if not resp.ok then error(os_api:api_error(resp, "reading server " .. id)) end
--
-- HTTP error statuses come back as data (resp.status); network failures
-- raise the binding's error table (kind "connect", "timeout", ...); a
-- Keystone refusal raises {kind = "auth", http_status = 401 or 403}; a
-- throttle that would outlast the hook deadline raises {kind = "openstack",
-- http_status = 429}.
--
-- Tokens are kept per VM (module state) until shortly before they expire:
-- a cluster's tasks share one token instead of asking Keystone for one
-- per task. A 401 from a service drops the token and asks again once.

local http = require("loom.http")
local util = require("lib.openstack.util")

local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

local client = {}

local Client = {}
Client.__index = Client

-- Seconds kept back from the hook deadline for the last request and a
-- clear error.
client.DEADLINE_MARGIN = 5

-- A token is renewed when it has less than this many seconds left: a
-- long CONFIRM must not start a request with a token about to expire.
client.TOKEN_MARGIN = 300

-- The most 429/413 answers one call waits out; each wait is bounded by
-- the hook deadline, this only stops a cloud that throttles forever.
local MAX_THROTTLED = 10

-- The longest wait between throttled attempts when the cloud says nothing
-- (no Retry-After); a longer Retry-After is honoured.
local MAX_BACKOFF = 30

local IDEMPOTENT = { GET = true, HEAD = true, PUT = true, DELETE = true }

--- Seconds left before the hook deadline, minus the margin (math.huge
--- without a deadline, as in the REPL).
function client.remaining()
  local r = time and time.remaining()
  if r == nil then return math.huge end
  return r - client.DEADLINE_MARGIN
end

function client.now()
  return time and time.now() or os.time()
end

--- sleep waits `seconds` within the hook deadline, or raises `why` when
--- that would pass it.
function client.sleep(seconds, why)
  if not time then
    error({ kind = "openstack", message = why .. "; waiting needs the loom.time module, which this loomd does not provide" }, 0)
  end
  if seconds > client.remaining() then
    error({ kind = "timeout", message = ("%s, and the hook deadline leaves no time to wait %.1fs more"):format(why, seconds) }, 0)
  end
  time.sleep(seconds)
end

-- Keystone ------------------------------------------------------------------

--- keystone_url turns the auth URL an operator gives (Coopr's default was
--- Keystone v2's ".../v2.0/tokens") into the v3 root ".../v3".
function client.keystone_url(raw)
  local u = util.trim(raw)
  if u == "" then
    error({ kind = "config", message = "openstack_auth_url is empty: give Keystone's URL, such as https://keystone.example.com:5000/v3" }, 0)
  end
  if not u:match("^https?://[^/]") then
    error({ kind = "config", message = ("openstack_auth_url %q is not an http(s) URL"):format(u) }, 0)
  end
  u = u:gsub("/+$", "")
  u = u:gsub("/auth/tokens$", ""):gsub("/tokens$", "")
  if u:match("/v3$") then return u end
  local before = u:match("^(.*)/v2%.0$")
  if before then
    -- Keystone v2 is gone from every supported OpenStack release; the same
    -- endpoint serves v3 at /v3.
    return before .. "/v3"
  end
  if u:match("/v%d[%d%.]*$") then
    error({ kind = "config", message = ("openstack_auth_url %q names an identity API version other than v3 (or v2.0, which is read as v3)"):format(u) }, 0)
  end
  return u .. "/v3"
end

-- auth_body builds the POST /v3/auth/tokens body from the fields, and a
-- description of the identity for messages (never a secret).
local function auth_body(f)
  local app_id, app_name = util.str(f.application_credential_id), util.str(f.application_credential_name)
  if app_id ~= "" or app_name ~= "" then
    local secret = util.str(f.application_credential_secret)
    if secret == "" then
      error({ kind = "config", message = "application_credential_secret is empty: an application credential needs its secret" }, 0)
    end
    local cred = { secret = secret }
    local who
    if app_id ~= "" then
      cred.id = app_id
      who = "application credential " .. app_id
    else
      -- A name is unique per user only: the user must be named too.
      local user = util.str(f.api_user)
      if user == "" then
        error({ kind = "config", message = "application_credential_name needs api_user (the credential's owner); or give application_credential_id" }, 0)
      end
      cred.name = app_name
      cred.user = { name = user, domain = { name = util.str(f.user_domain, "Default") } }
      who = ("application credential %s of %s"):format(app_name, user)
    end
    -- An application credential carries its own project scope.
    return { auth = { identity = { methods = { "application_credential" }, application_credential = cred } } }, who
  end

  local user, password = util.str(f.api_user), util.str(f.api_password)
  if user == "" or password == "" then
    error({ kind = "config", message = "Keystone needs api_user and api_password, or application_credential_id and application_credential_secret" }, 0)
  end
  local body = { auth = { identity = { methods = { "password" }, password = {
    user = { name = user, domain = { name = util.str(f.user_domain, "Default") }, password = password },
  } } } }
  local project_id, project = util.str(f.project_id), util.str(f.openstack_tenant)
  local scope
  if project_id ~= "" then
    body.auth.scope = { project = { id = project_id } }
    scope = "project " .. project_id
  elseif project ~= "" then
    body.auth.scope = { project = { name = project, domain = { name = util.str(f.project_domain, "Default") } } }
    scope = "project " .. project
  else
    error({ kind = "config", message = "Keystone needs a project: set openstack_tenant (its name) or project_id" }, 0)
  end
  return body, ("user %s, %s"):format(user, scope)
end

-- Rackspace's identity service, by region (fog's endpoints): London's
-- accounts live apart from the others.
client.RACKSPACE_US = "https://identity.api.rackspacecloud.com/v2.0"
client.RACKSPACE_UK = "https://lon.identity.api.rackspacecloud.com/v2.0"

--- rackspace_url turns the identity URL of a Rackspace account (or "" for
--- the region's default) into the v2.0 root ".../v2.0".
function client.rackspace_url(raw, region)
  local u = util.trim(raw)
  if u == "" then
    return region:lower() == "lon" and client.RACKSPACE_UK or client.RACKSPACE_US
  end
  if not u:match("^https?://[^/]") then
    error({ kind = "config", message = ("rackspace_auth_url %q is not an http(s) URL"):format(u) }, 0)
  end
  u = u:gsub("/+$", ""):gsub("/tokens$", "")
  if u:match("/v2%.0$") then return u end
  if u:match("/v%d[%d%.]*$") then
    error({ kind = "config", message = ("rackspace_auth_url %q names an identity API version other than v2.0 (Rackspace's)"):format(u) }, 0)
  end
  return u .. "/v2.0"
end

-- tokens: account key -> {token, expires, catalog, project}, per VM.
local tokens = {}

-- new_rackspace is client.new for Rackspace's identity service: an API
-- key for a user, and a region (DFW, ORD, IAD, LON, SYD, HKG) that picks
-- the endpoints of the catalog.
local function new_rackspace(f)
  local user, key = util.str(f.api_user), util.str(f.api_key)
  if user == "" or key == "" then
    error({ kind = "config", message = "Rackspace needs api_user (the user name) and api_password (the user's API key)" }, 0)
  end
  local region = util.str(f.region)
  if region == "" then
    error({ kind = "config", message = "rackspace_region is empty: give the region of the servers, such as dfw" }, 0)
  end
  local url = client.rackspace_url(f.auth_url, region)
  local c = setmetatable({
    keystone = url,
    v2 = true,
    auth = { auth = { ["RAX-KSKEY:apiKeyCredentials"] = { username = user, apiKey = key } } },
    who = "Rackspace user " .. user,
    region = region,
    region_field = "rackspace_region",
    interface = "public",
    timeout = tonumber(f.api_timeout) or 30,
    verify = util.truthy(f.openstack_ssl_verify_peer, true),
    ca = util.str(f.openstack_ca_cert),
    endpoints = {},
  }, Client)
  c.key = util.digest(url .. "\n" .. c.who .. "\n" .. key)
  return c
end

-- v2_catalog turns a Keystone v2.0 service catalog (endpoints with
-- publicURL, internalURL and adminURL) into the v3 shape endpoint() reads.
local function v2_catalog(services)
  local out = {}
  for _, svc in ipairs(type(services) == "table" and services or {}) do
    local entry = { type = svc.type, name = svc.name, endpoints = {} }
    for _, ep in ipairs(type(svc.endpoints) == "table" and svc.endpoints or {}) do
      for iface, field in pairs({ public = "publicURL", internal = "internalURL", admin = "adminURL" }) do
        if type(ep[field]) == "string" and ep[field] ~= "" then
          entry.endpoints[#entry.endpoints + 1] = { interface = iface, region = ep.region or "", url = ep[field] }
        end
      end
    end
    out[#out + 1] = entry
  end
  return out
end

--- Builds a client from the provider's fields. No request is sent yet.
--- With f.identity == "rackspace", it speaks Rackspace's identity service
--- (fields api_user, api_key, region and auth_url, set by the rackspace
--- provider type).
function client.new(f)
  if f.identity == "rackspace" then return new_rackspace(f) end
  local url = client.keystone_url(f.openstack_auth_url)
  local body, who = auth_body(f)
  local c = setmetatable({
    keystone = url,
    auth = body,
    who = who,
    region = util.str(f.region),
    interface = util.str(f.interface, "public"),
    timeout = tonumber(f.api_timeout) or 30,
    verify = util.truthy(f.openstack_ssl_verify_peer, true),
    ca = util.str(f.openstack_ca_cert),
    endpoints = {},
  }, Client)
  -- The cache key names the identity without holding its secret: a digest
  -- of everything that makes a different token.
  local secret = (body.auth.identity.password and body.auth.identity.password.user.password)
    or body.auth.identity.application_credential.secret
  c.key = util.digest(url .. "\n" .. who .. "\n" .. secret .. "\n" .. tostring(f.user_domain) .. "\n" .. tostring(f.project_domain))
  if c.interface ~= "public" and c.interface ~= "internal" and c.interface ~= "admin" then
    error({ kind = "config", message = ("interface %q must be public, internal or admin"):format(c.interface) }, 0)
  end
  return c
end

function Client:tls()
  if not self.verify then return { insecure_skip_verify = true } end
  if self.ca ~= "" then return { ca = self.ca } end
  return nil
end

-- send is one attempt: the binding's response, or its error table.
function Client:send(method, url, opts, headers)
  return pcall(http.request, method, url, {
    headers = headers,
    query = opts.query,
    json = opts.json,
    timeout = self.timeout,
    tls = self:tls(),
    retries = 0,
  })
end

--- authenticate returns the token record, from the cache when it is still
--- good for TOKEN_MARGIN seconds, otherwise from Keystone.
function Client:authenticate(force)
  local cached = tokens[self.key]
  if not force and cached and cached.expires - client.now() > client.TOKEN_MARGIN then
    return cached
  end
  tokens[self.key] = nil
  if self.v2 then return self:authenticate_v2() end
  local url = self.keystone .. "/auth/tokens"
  local what = "getting a Keystone token for " .. self.who
  local resp = self:retrying("POST", url, { json = self.auth, retries = 2, retry_post = true },
    { Accept = "application/json" }, what)
  if resp.status == 401 or resp.status == 403 then
    local err = self:api_error(resp, what)
    err.kind = "auth"
    err.message = err.message .. ("; check %s"):format(resp.status == 401
      and "the credentials (api_user/api_password, or the application credential) and user_domain"
      or "that the user has a role on the project (openstack_tenant, project_domain)")
    error(err, 0)
  end
  if resp.status ~= 201 and resp.status ~= 200 then
    error(self:api_error(resp, what), 0)
  end
  local token = resp.headers["x-subject-token"]
  local ok, doc = pcall(resp.json, resp)
  if token == nil or token == "" or not ok or type(doc) ~= "table" or type(doc.token) ~= "table" then
    error({ kind = "openstack", message = what .. ": Keystone answered without a token (no X-Subject-Token header or token body)" }, 0)
  end
  local expires = util.parse_time(doc.token.expires_at) or (client.now() + 3600)
  local rec = { token = token, expires = expires, catalog = doc.token.catalog or {}, project = doc.token.project }
  tokens[self.key] = rec
  log.debug("got a Keystone token for %s, valid until %s", self.who, tostring(doc.token.expires_at))
  return rec
end

-- authenticate_v2 asks Rackspace's identity service (Keystone v2.0) for a
-- token: POST /tokens with the API key; the token and catalog are in the
-- answer's access object.
function Client:authenticate_v2()
  local what = "getting a Rackspace identity token for " .. self.who
  local resp = self:retrying("POST", self.keystone .. "/tokens", { json = self.auth, retries = 2, retry_post = true },
    { Accept = "application/json" }, what)
  if resp.status == 401 or resp.status == 403 then
    local err = self:api_error(resp, what)
    err.kind = "auth"
    err.message = err.message .. "; check api_user (the Rackspace user name) and api_password (the user's API key, not the password)"
    error(err, 0)
  end
  if resp.status ~= 200 and resp.status ~= 203 then
    error(self:api_error(resp, what), 0)
  end
  local ok, doc = pcall(resp.json, resp)
  local access = ok and type(doc) == "table" and doc.access
  local tok = type(access) == "table" and type(access.token) == "table" and access.token
  if not tok or type(tok.id) ~= "string" or tok.id == "" then
    error({ kind = "openstack", message = what .. ": the identity service answered without a token (no access.token.id)" }, 0)
  end
  local expires = util.parse_time(tok.expires) or (client.now() + 3600)
  local rec = { token = tok.id, expires = expires, catalog = v2_catalog(access.serviceCatalog), project = tok.tenant }
  tokens[self.key] = rec
  log.debug("got a Rackspace identity token for %s, valid until %s", self.who, tostring(tok.expires))
  return rec
end

--- forget drops the cached token (a service refused it).
function Client:forget()
  tokens[self.key] = nil
  self.endpoints = {}
end

--- endpoint returns the URL of the catalog's `service` (compute, network,
--- image) for the client's interface and region, without a trailing /.
function Client:endpoint(service)
  if self.endpoints[service] then return self.endpoints[service] end
  local rec = self:authenticate()
  local regions, found = {}, nil
  for _, entry in ipairs(rec.catalog) do
    if entry.type == service then
      for _, ep in ipairs(entry.endpoints or {}) do
        if ep.interface == self.interface then
          local r = ep.region_id or ep.region or ""
          regions[#regions + 1] = r ~= "" and r or "(none)"
          -- Rackspace names regions DFW and Coopr's fields dfw: regions
          -- are matched without case.
          if self.region == "" or r:lower() == self.region:lower() or tostring(ep.region or ""):lower() == self.region:lower() then
            if found == nil then found = ep.url end
          end
        end
      end
    end
  end
  if found == nil then
    if #regions == 0 then
      return nil, ("the service catalog has no %s endpoint for interface %s"):format(service, self.interface)
    end
    return nil, ("the service catalog has %s endpoints in regions %s, none in region %q (field %s)")
      :format(service, table.concat(regions, ", "), self.region, self.region_field or "region")
  end
  if self.region == "" and #regions > 1 then
    log.warn("the catalog has %s endpoints in regions %s; using the first (%s): set the region field to choose",
      service, table.concat(regions, ", "), found)
  end
  found = tostring(found):gsub("/+$", "")
  self.endpoints[service] = found
  return found
end

-- throttle_wait says how long a throttled answer asks to wait: 429, or
-- Nova's 413 overLimit with Retry-After or retryAfter.
local function throttle_wait(resp, attempt)
  local ra = tonumber(resp.headers["retry-after"])
  if ra == nil then
    local ok, doc = pcall(resp.json, resp)
    if ok and type(doc) == "table" then
      for _, v in pairs(doc) do
        if type(v) == "table" and v.retryAfter ~= nil then ra = tonumber(v.retryAfter) end
      end
    end
  end
  if ra == nil then ra = math.min(2 ^ (attempt - 1), MAX_BACKOFF) end
  return math.max(ra, 0)
end

local function throttled(resp)
  if resp.status == 429 then return true end
  return resp.status == 413 and (resp.headers["retry-after"] ~= nil or tostring(resp.body):find("overLimit", 1, true) ~= nil)
end

-- retrying sends method url until it gets an answer that is not a
-- throttle (429, 413 overLimit), waiting as the cloud asks within the hook
-- deadline; 5xx answers and lost connections are sent again up to
-- opts.retries times for idempotent methods (and POST when
-- opts.retry_post says the POST is safe to repeat, as a token request is).
function Client:retrying(method, url, opts, headers, what)
  local failures, throttles = 0, 0
  local repeatable = IDEMPOTENT[method] or opts.retry_post
  while true do
    local ok, resp = self:send(method, url, opts, headers)
    if ok and throttled(resp) then
      throttles = throttles + 1
      local wait = throttle_wait(resp, throttles)
      if throttles > MAX_THROTTLED then
        local err = self:api_error(resp, what)
        err.message = err.message .. ("; the cloud throttled %d attempts in a row: run the task again later"):format(throttles)
        err.http_status = 429
        error(err, 0)
      end
      if wait > client.remaining() then
        local err = self:api_error(resp, what)
        err.message = err.message .. ("; the cloud asks to wait %.0fs, past the hook deadline"):format(wait)
        err.http_status = 429
        error(err, 0)
      end
      log.warn("%s: HTTP %d (throttled); retrying in %.1fs", what, resp.status, wait)
      client.sleep(wait, what)
    elseif ok and (resp.status < 500 or not repeatable) then
      return resp
    else
      local transient = ok or (type(resp) == "table" and (resp.kind == "connect" or resp.kind == "timeout"))
      failures = failures + 1
      if not transient or not repeatable or failures > (opts.retries or 0) then
        if ok then return resp end
        if type(resp) == "table" and resp.message then
          resp.message = what .. ": " .. tostring(resp.message)
        end
        error(resp, 0)
      end
      local wait = ok and tonumber(resp.headers["retry-after"]) or math.min(0.5 * 2 ^ (failures - 1), 10)
      if wait > client.remaining() then
        if ok then return resp end
        error(resp, 0)
      end
      log.debug("%s: %s; retrying in %.1fs", what, ok and ("HTTP " .. resp.status) or tostring(resp.message), wait)
      client.sleep(wait, what)
    end
  end
end

--- request sends method path to the catalog's `service` with the token.
--- opts: query, json, retries (default 0; idempotent methods only), what
--- (for messages). A 401 drops the token and tries once more with a new
--- one.
function Client:request(service, method, path, opts)
  opts = opts or {}
  local what = opts.what or (method .. " " .. path)
  for round = 1, 2 do
    local base, why = self:endpoint(service)
    if base == nil then
      error({ kind = "openstack", message = what .. ": " .. why }, 0)
    end
    local rec = self:authenticate()
    local resp = self:retrying(method, base .. path, opts,
      { ["X-Auth-Token"] = rec.token, Accept = "application/json" }, what)
    if resp.status ~= 401 or round == 2 then
      return resp
    end
    log.info("%s: the token was refused (401); getting a new one", what)
    self:forget()
  end
end

--- api_error builds the error table of a failed response with the
--- cloud's own explanation: Nova's {"itemNotFound": {"code", "message"}},
--- Neutron's {"NeutronError": {"type", "message"}}, Keystone's {"error":
--- {"code", "title", "message"}}.
function Client:api_error(resp, what)
  local detail, code
  local ok, doc = pcall(resp.json, resp)
  if ok and type(doc) == "table" then
    for k, v in pairs(doc) do
      if type(v) == "table" and v.message ~= nil then
        detail = tostring(v.message)
        code = v.type or v.title or k
        break
      elseif k == "message" and type(v) == "string" then
        detail = v
      end
    end
  end
  if detail == nil then
    detail = tostring(resp.body or ""):sub(1, 200):gsub("%s+", " ")
    if detail == "" or detail == " " then detail = "no error message in the response" end
  end
  local msg = ("OpenStack: %s: HTTP %d%s: %s"):format(what, resp.status, code and (" " .. tostring(code)) or "", detail)
  local rid = resp.headers["x-openstack-request-id"] or resp.headers["x-compute-request-id"]
  if rid then msg = msg .. (" (request %s)"):format(rid) end
  return { kind = "openstack", message = msg, http_status = resp.status, code = code, request_id = rid }
end

--- has reports whether the catalog lists `service` for this client.
function Client:has(service)
  local ok, url = pcall(self.endpoint, self, service)
  return ok and url ~= nil
end

return client
