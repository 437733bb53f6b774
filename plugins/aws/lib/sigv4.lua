-- AWS Signature Version 4, in Lua on loom.crypto.
--
--   local sigv4 = require("lib.sigv4")
--   local headers = sigv4.sign({
--     method = "POST", host = "ec2.us-east-1.amazonaws.com", path = "/", query = nil,
--     headers = { ["Content-Type"] = "application/x-www-form-urlencoded; charset=utf-8" },
--     body = body, region = "us-east-1", service = "ec2", time = time.now(),
--     access_key = fields.api_user, secret_key = fields.api_password, session_token = nil,
--   })
--
-- returns the headers to send: the given ones plus X-Amz-Date,
-- X-Amz-Security-Token (temporary credentials) and Authorization. Every
-- given header is signed, and Host. The steps are those of AWS's
-- "Create a signed AWS API request" (canonical request, string to sign,
-- signing key, signature); test/ec2conformance checks the signatures
-- with the AWS SDK for Go v2's signer.

local crypto = require("loom.crypto")

local sigv4 = {}

--- RFC 3986 percent-encoding as SigV4 wants it: everything but
--- A-Z a-z 0-9 - _ . ~ becomes %XX (upper-case hex).
function sigv4.uri_encode(s)
  return (tostring(s):gsub("[^A-Za-z0-9%-%._~]", function(c)
    return ("%%%02X"):format(c:byte())
  end))
end

-- canonical_query sorts the parameters by encoded name, then value.
local function canonical_query(query)
  local parts = {}
  for k, v in pairs(query or {}) do
    parts[#parts + 1] = sigv4.uri_encode(k) .. "=" .. sigv4.uri_encode(v)
  end
  table.sort(parts)
  return table.concat(parts, "&")
end

-- canonical_path encodes each segment of an absolute path; "/" when empty.
local function canonical_path(path)
  if path == nil or path == "" then return "/" end
  return (path:gsub("[^/]+", sigv4.uri_encode))
end

local function trim(v)
  return (tostring(v):gsub("^%s+", ""):gsub("%s+$", ""):gsub("%s+", " "))
end

--- Formats an epoch time as X-Amz-Date (YYYYMMDDTHHMMSSZ, UTC).
function sigv4.amz_date(t)
  return os.date("!%Y%m%dT%H%M%SZ", math.floor(t))
end

--- The signing key of a date (YYYYMMDD), region and service, raw bytes.
function sigv4.signing_key(secret, date, region, service)
  local k = crypto.hmac("sha256", "AWS4" .. secret, date, "raw")
  k = crypto.hmac("sha256", k, region, "raw")
  k = crypto.hmac("sha256", k, service, "raw")
  return crypto.hmac("sha256", k, "aws4_request", "raw")
end

--- Signs a request; see the top of the file. Returns the headers to send
--- and, for tests and logs, the canonical request (no secrets in it).
function sigv4.sign(req)
  assert(req.access_key and req.access_key ~= "", "sigv4.sign: access_key is required")
  assert(req.secret_key and req.secret_key ~= "", "sigv4.sign: secret_key is required")
  local amz_date = sigv4.amz_date(req.time)
  local date = amz_date:sub(1, 8)
  local out = {}
  for k, v in pairs(req.headers or {}) do out[k] = v end
  out["X-Amz-Date"] = amz_date
  if req.session_token and req.session_token ~= "" then
    out["X-Amz-Security-Token"] = req.session_token
  end
  local signed = { host = trim(req.host) }
  for k, v in pairs(out) do signed[k:lower()] = trim(v) end
  local names = {}
  for k in pairs(signed) do names[#names + 1] = k end
  table.sort(names)
  local lines = {}
  for _, n in ipairs(names) do lines[#lines + 1] = n .. ":" .. signed[n] .. "\n" end
  local signed_headers = table.concat(names, ";")
  local canonical = table.concat({
    req.method:upper(),
    canonical_path(req.path),
    canonical_query(req.query),
    table.concat(lines),
    signed_headers,
    crypto.sha256(req.body or ""),
  }, "\n")
  local scope = table.concat({ date, req.region, req.service, "aws4_request" }, "/")
  local string_to_sign = table.concat({ "AWS4-HMAC-SHA256", amz_date, scope, crypto.sha256(canonical) }, "\n")
  local signature = crypto.hmac("sha256", sigv4.signing_key(req.secret_key, date, req.region, req.service), string_to_sign)
  out.Authorization = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s")
    :format(req.access_key, scope, signed_headers, signature)
  return out, canonical
end

return sigv4
