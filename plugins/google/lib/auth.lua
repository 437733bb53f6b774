-- Google's OAuth 2.0 service-account flow (the JWT bearer grant, RFC 7523),
-- in Lua on loom.crypto and loom.http.
--
--   local auth = require("lib.auth")
--   local token = auth.token({ key = crypto.key({ resource = "api_keys/sa.json" }),
--     token_url = "https://oauth2.googleapis.com/token", timeout = 30 })
--
-- The plugin signs a JWT with the service account's private key (RS256;
-- the key stays in loom.crypto, Lua holds a handle) and trades it for an
-- access token at the token endpoint. Tokens are kept per VM until five
-- minutes before they expire. No loom.oauth2 binding: this is one signature
-- and one POST, and done here the POST goes through loom.http (the
-- allow-list, the test fakes, retries on the virtual clock, the token
-- registered as a secret when used as a bearer).

local crypto = require("loom.crypto")
local json = require("loom.json")
local http = require("loom.http")

local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

local auth = {}

--- The scope the provider asks for.
auth.SCOPE = "https://www.googleapis.com/auth/compute"

--- The JWT's audience: Google's token endpoint (also when token_url
--- names a private endpoint in front of it).
auth.AUDIENCE = "https://oauth2.googleapis.com/token"

--- Seconds before expiry a cached token is replaced.
auth.EARLY = 300

-- Per VM: cache key -> {token, expires}. A VM serves one tenant.
local cache = {}

local function now()
  return time and time.now() or os.time()
end

local function cache_key(opts)
  return table.concat({ opts.key.fingerprint, opts.email, opts.token_url, auth.SCOPE }, "\n")
end

--- The JWT assertion for opts.key and opts.email, issued now.
function auth.assertion(opts)
  local iat = math.floor(now())
  local header = { alg = "RS256", typ = "JWT", kid = opts.key.private_key_id }
  local claims = { iss = opts.email, scope = auth.SCOPE, aud = auth.AUDIENCE, iat = iat, exp = iat + 3600 }
  local signing_input = crypto.base64url_encode(json.encode(header)) .. "." .. crypto.base64url_encode(json.encode(claims))
  return signing_input .. "." .. opts.key:sign("RS256", signing_input)
end

local function form_encode(t)
  local parts = {}
  for _, k in ipairs({ "grant_type", "assertion" }) do
    parts[#parts + 1] = k .. "=" .. tostring(t[k]):gsub("[^%w%-%._~]", function(c) return ("%%%02X"):format(c:byte()) end)
  end
  return table.concat(parts, "&")
end

--- Returns an access token for opts: key (a crypto.Key of the service
--- account), email (its client_email), token_url, timeout. Raises
--- {kind = "google", code = "auth", reason, http_status, message} when
--- the endpoint refuses the grant.
function auth.token(opts)
  local ck = cache_key(opts)
  local hit = cache[ck]
  if hit and hit.expires - auth.EARLY > now() then
    return hit.token
  end
  local resp = http.request("POST", opts.token_url, {
    headers = { ["Content-Type"] = "application/x-www-form-urlencoded" },
    body = form_encode({ grant_type = "urn:ietf:params:oauth:grant-type:jwt-bearer", assertion = auth.assertion(opts) }),
    timeout = opts.timeout,
    -- A token request changes nothing: safe to send again after a 5xx,
    -- a 429 or a lost connection.
    retries = 4, retry_non_idempotent = true,
  })
  local ok, body = pcall(resp.json, resp)
  if not ok then body = nil end
  if resp.status ~= 200 or type(body) ~= "table" or type(body.access_token) ~= "string" then
    local reason = type(body) == "table" and body.error or ("HTTP " .. resp.status)
    local desc = type(body) == "table" and body.error_description or tostring(resp.body or ""):sub(1, 200)
    error({
      kind = "google", code = "auth", reason = reason, http_status = resp.status,
      message = ("Google OAuth 2.0 token endpoint (%s) refused the service account %s: HTTP %d %s: %s")
        :format(opts.token_url, tostring(opts.email), resp.status, tostring(reason), tostring(desc)),
    }, 0)
  end
  cache[ck] = { token = body.access_token, expires = now() + (tonumber(body.expires_in) or 3600) }
  return body.access_token
end

--- Forgets the cached token of opts (the API refused it).
function auth.forget(opts)
  cache[cache_key(opts)] = nil
end

return auth
