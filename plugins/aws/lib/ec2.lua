-- A small client for the Amazon EC2 Query API on loom.http, loom.xml and
-- lib/sigv4.lua.
--
--   local ec2 = require("lib.ec2")
--   local client = ec2.new({ region = "us-east-1", access_key = ..., secret_key = ... })
--   local doc = client:call("DescribeInstances", { ["InstanceId.1"] = "i-0123..." })
--   -- doc is the decoded XML answer: doc.reservationSet.item[1].instancesSet.item[1]
--
-- Every request is a POST of the form-encoded parameters, signed with
-- Signature Version 4. Answers are decoded with loom.xml ("item" lists are
-- always lists). An error answer raises {kind = "aws", code, message,
-- aws_message, http_status, request_id, action}. Throttling
-- (RequestLimitExceeded) is waited out with exponential back-off and
-- jitter on loom.time's clock, within the hook's deadline; 5xx answers
-- and lost connections are sent again a few times. Every action the
-- provider calls may be sent again: RunInstances carries a ClientToken,
-- ImportKeyPair's caller handles InvalidKeyPair.Duplicate, the others are
-- idempotent.

local http = require("loom.http")
local xml = require("loom.xml")
local sigv4 = require("lib.sigv4")

local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

local ec2 = {}

--- The API version the provider speaks (the EC2 API reference's current one).
ec2.VERSION = "2016-11-15"

--- Seconds kept back from the hook deadline for the last call and a clear error.
ec2.DEADLINE_MARGIN = 5

--- Error codes that mean "too many requests": wait and send again.
ec2.THROTTLE = {
  RequestLimitExceeded = true, Throttling = true, ThrottlingException = true,
  RequestThrottled = true, RequestThrottledException = true, TooManyRequestsException = true,
}

--- Error codes of a credential EC2 does not accept (CREATE reports Coopr's
--- "nothing was created" status 201 for them) and of a credential without
--- the permission (202).
ec2.AUTH_FAILED = {
  AuthFailure = true, InvalidClientTokenId = true, SignatureDoesNotMatch = true,
  IncompleteSignature = true, MissingAuthenticationToken = true, ExpiredToken = true,
  RequestExpired = true, OptInRequired = true, Blocked = true,
}
ec2.NOT_PERMITTED = { UnauthorizedOperation = true }

-- How often throttling and transient failures are retried: each wait is
-- also bounded by the hook deadline.
local MAX_THROTTLED = 10
local MAX_TRANSIENT = 4
-- Back-off: base * 2^(n-1), capped, with equal jitter (AWS's SDKs use
-- 20 s as the cap).
local THROTTLE_BASE, TRANSIENT_BASE, MAX_DELAY = 1, 0.5, 20

--- Seconds left before the hook deadline, minus the margin.
function ec2.remaining()
  local r = time and time.remaining()
  if r == nil then return math.huge end
  return r - ec2.DEADLINE_MARGIN
end

--- The clock requests are signed with (loom.time's, virtual in tests).
function ec2.now()
  return time and time.now() or os.time()
end

local REGION = "^[a-z][a-z]%-[a-z%-]*%-%d+$"

--- The endpoint of a region: https://ec2.<region>.amazonaws.com (.com.cn
--- for the China regions), unless override names another (a VPC
--- endpoint, a private cloud).
function ec2.endpoint(region, override)
  if override ~= nil and override ~= "" then
    return (tostring(override):gsub("/+$", ""))
  end
  local suffix = region:match("^cn%-") and "amazonaws.com.cn" or "amazonaws.com"
  return "https://ec2." .. region .. "." .. suffix
end

local Client = {}
Client.__index = Client

--- Builds a client. opts: region, access_key, secret_key, session_token
--- (temporary credentials), endpoint (override), timeout (seconds per
--- attempt, default 30).
function ec2.new(opts)
  local region = tostring(opts.region or "")
  if not region:match(REGION) then
    error({ kind = "config", message = ("aws_region %q is not an AWS region such as us-east-1 or eu-west-2"):format(region) }, 0)
  end
  if opts.access_key == nil or opts.access_key == "" or opts.secret_key == nil or opts.secret_key == "" then
    error({ kind = "config", message = "the AWS access key (api_user) and secret key (api_password) are required; instance profiles (IMDS) are not used" }, 0)
  end
  local url = ec2.endpoint(region, opts.endpoint)
  local scheme, host, path = url:match("^(https?)://([^/]+)(.*)$")
  if not scheme then
    error({ kind = "config", message = ("aws_endpoint %q is not an http(s) URL"):format(url) }, 0)
  end
  if path == "" then path = "/" end
  return setmetatable({
    region = region, url = scheme .. "://" .. host .. path, host = host, path = path,
    access_key = opts.access_key, secret_key = opts.secret_key, session_token = opts.session_token,
    timeout = tonumber(opts.timeout) or 30,
  }, Client)
end

-- form encodes the parameters, sorted by name, as the SDKs do.
local function form(params)
  local names = {}
  for k in pairs(params) do names[#names + 1] = k end
  table.sort(names)
  local parts = {}
  for _, k in ipairs(names) do
    parts[#parts + 1] = sigv4.uri_encode(k) .. "=" .. sigv4.uri_encode(params[k])
  end
  return table.concat(parts, "&")
end

-- send is one attempt: true and the response, or false and the binding's
-- error table.
function Client:send(action, params)
  local p = { Action = action, Version = ec2.VERSION }
  for k, v in pairs(params or {}) do
    if type(v) == "boolean" then v = v and "true" or "false" end
    p[k] = tostring(v)
  end
  local body = form(p)
  local headers = sigv4.sign({
    method = "POST", host = self.host, path = self.path, body = body,
    headers = { ["Content-Type"] = "application/x-www-form-urlencoded; charset=utf-8" },
    region = self.region, service = "ec2", time = ec2.now(),
    access_key = self.access_key, secret_key = self.secret_key, session_token = self.session_token,
  })
  return pcall(http.request, "POST", self.url, {
    headers = headers, body = body, timeout = self.timeout, retries = 0, max_body = 16 * 1024 * 1024,
  })
end

--- Builds the error table of an EC2 error answer (or of an answer that is
--- not EC2's XML, from a proxy say).
function Client:api_error(resp, action)
  local code, msg, request_id
  local ok, doc, root = pcall(xml.decode, resp.body or "")
  if ok and root == "Response" and type(doc) == "table" and type(doc.Errors) == "table" then
    local e = xml.list(doc.Errors.Error)[1] or {}
    code, msg, request_id = e.Code, e.Message, doc.RequestID
  elseif ok and root == "ErrorResponse" and type(doc) == "table" then
    local e = xml.list(doc.Error)[1] or {}
    code, msg, request_id = e.Code, e.Message, doc.RequestId
  end
  if code == nil then
    code = "HTTP" .. tostring(resp.status)
    msg = tostring(resp.body or ""):sub(1, 200):gsub("%s+", " ")
    if msg == "" or msg == " " then msg = "no error message in the answer" end
  end
  return {
    kind = "aws",
    code = code,
    aws_message = msg,
    http_status = resp.status,
    request_id = request_id,
    action = action,
    message = ("EC2 %s in %s: %s: %s (HTTP %d%s)"):format(action, self.region, tostring(code), tostring(msg), resp.status,
      request_id and (", request " .. tostring(request_id)) or ""),
  }
end

local function backoff(base, n)
  local cap = math.min(MAX_DELAY, base * 2 ^ (n - 1))
  return cap / 2 + math.random() * cap / 2
end

-- pause waits, or raises err (with why added) when the wait would pass
-- the hook deadline or this loomd cannot wait.
local function pause(err, wait, why)
  if not time or wait > ec2.remaining() then
    if type(err) == "table" then
      err.message = tostring(err.message) .. "; " .. why .. (time and "; the hook deadline leaves no time to wait more" or "")
    end
    error(err, 0)
  end
  time.sleep(wait)
end

--- Calls an action and returns its decoded answer (and the root element's
--- name). See the top of the file for errors and retries.
function Client:call(action, params)
  local throttled, failures = 0, 0
  while true do
    local ok, resp = self:send(action, params)
    if ok and resp.status == 200 then
      local dok, doc, root = pcall(xml.decode, resp.body)
      if not dok then
        error({ kind = "aws", code = "BadAnswer", action = action, http_status = 200,
          message = ("EC2 %s in %s: the answer is not XML: %s"):format(action, self.region, tostring(type(doc) == "table" and doc.message or doc)) }, 0)
      end
      return doc, root
    end
    local err
    if ok then
      err = self:api_error(resp, action)
    else
      err = resp
      if type(err) ~= "table" or (err.kind ~= "connect" and err.kind ~= "timeout") then
        error(err, 0) -- permission, config: sending again cannot help
      end
    end
    if ok and ec2.THROTTLE[err.code] then
      throttled = throttled + 1
      if throttled > MAX_THROTTLED then
        err.message = err.message .. ("; still throttled after %d attempts: run fewer tasks against this account at once, or later"):format(throttled)
        error(err, 0)
      end
      local wait = backoff(THROTTLE_BASE, throttled)
      log.warn("EC2 %s: %s (attempt %d); sending it again in %.1fs", action, err.code, throttled, wait,
        { aws_code = err.code, wait = wait })
      pause(err, wait, "throttled")
    elseif not ok or resp.status >= 500 then
      failures = failures + 1
      if failures > MAX_TRANSIENT then
        err.message = tostring(err.message) .. (" (after %d attempts)"):format(failures)
        error(err, 0)
      end
      local wait = backoff(TRANSIENT_BASE, failures)
      log.warn("EC2 %s: %s; sending it again in %.1fs", action, tostring(ok and err.code or err.message), wait)
      pause(err, wait, "the service kept failing")
    else
      error(err, 0)
    end
  end
end

-- Query API parameters -------------------------------------------------

--- Adds list values as prefix.1, prefix.2, ...
function ec2.add_list(params, prefix, values)
  for i, v in ipairs(values or {}) do
    params[prefix .. "." .. i] = v
  end
  return params
end

--- Adds filters ({name, values} each) as Filter.N.Name, Filter.N.Value.M.
function ec2.add_filters(params, filters)
  for i, f in ipairs(filters) do
    params["Filter." .. i .. ".Name"] = f[1]
    ec2.add_list(params, "Filter." .. i .. ".Value", f[2])
  end
  return params
end

--- Adds TagSpecification.n for resource_type with tags ({key, value} each).
function ec2.add_tag_spec(params, n, resource_type, tags)
  local pre = "TagSpecification." .. n
  params[pre .. ".ResourceType"] = resource_type
  for i, t in ipairs(tags) do
    params[pre .. ".Tag." .. i .. ".Key"] = t[1]
    params[pre .. ".Tag." .. i .. ".Value"] = t[2]
  end
  return params
end

--- The instances of a DescribeInstances answer, flattened.
function ec2.instances(doc)
  local out = {}
  for _, r in ipairs(type(doc) == "table" and xml.list(doc.reservationSet and doc.reservationSet.item) or {}) do
    for _, i in ipairs(xml.list(r.instancesSet and r.instancesSet.item)) do
      out[#out + 1] = i
    end
  end
  return out
end

--- The value of an instance's tag.
function ec2.tag(inst, key)
  for _, t in ipairs(xml.list(inst.tagSet and inst.tagSet.item)) do
    if t.key == key then return t.value end
  end
  return nil
end

return ec2
