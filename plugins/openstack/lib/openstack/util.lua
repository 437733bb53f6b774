-- Small helpers of the OpenStack provider: field values as Coopr sends
-- them, times, base64, regular-expression quoting.

local util = {}

function util.trim(s)
  return (tostring(s or ""):match("^%s*(.-)%s*$"))
end

--- str returns a field as a trimmed string, or `default` when it is
--- absent or empty.
function util.str(v, default)
  if v == nil then return default or "" end
  local s = util.trim(tostring(v))
  if s == "" then return default or "" end
  return s
end

--- truthy reads a checkbox: Coopr sends "true"/"false" strings, loomd's
--- defaults are JSON booleans.
function util.truthy(v, default)
  if v == nil or v == "" then return default end
  if type(v) == "boolean" then return v end
  local s = tostring(v):lower()
  return s == "true" or s == "1" or s == "yes" or s == "on"
end

function util.split_list(s)
  local out = {}
  for item in tostring(s or ""):gmatch("[^,]+") do
    item = util.trim(item)
    if item ~= "" then out[#out + 1] = item end
  end
  return out
end

--- digest names a value in caches without holding it: two 32-bit string
--- hashes (djb2 and sdbm), exact in Lua's doubles.
function util.digest(s)
  local a, b = 5381, 0
  for i = 1, #s do
    local c = s:byte(i)
    a = (a * 33 + c) % 4294967296
    b = (c + b * 65599) % 4294967296
  end
  return ("%08x%08x"):format(a, b)
end

-- days_from_civil counts days from 1970-01-01 to y-m-d (proleptic
-- Gregorian; Howard Hinnant's algorithm), so times parse without the
-- machine's time zone.
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

--- parse_time reads an ISO 8601 time as OpenStack writes it
--- ("2015-08-27T09:49:58.000000Z", "2024-01-02T03:04:05+01:00", or
--- without a zone, which Nova means as UTC) and returns seconds since the
--- epoch, or nil.
function util.parse_time(s)
  if type(s) ~= "string" then return nil end
  local y, mo, d, h, mi, sec, rest = s:match("^(%d%d%d%d)-(%d%d)-(%d%d)[T ](%d%d):(%d%d):(%d%d)(.*)$")
  if not y then return nil end
  local t = days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(sec)
  rest = rest:gsub("^%.%d+", "")
  local sign, oh, om = rest:match("^([%+%-])(%d%d):?(%d%d)$")
  if sign then
    local off = tonumber(oh) * 3600 + tonumber(om) * 60
    if sign == "+" then t = t - off else t = t + off end
  end
  return t
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

--- base64 encodes s (Nova wants user_data base64-encoded).
function util.base64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local c1 = math.floor(n / 262144) % 64
    local c2 = math.floor(n / 4096) % 64
    local c3 = math.floor(n / 64) % 64
    local c4 = n % 64
    out[#out + 1] = B64:sub(c1 + 1, c1 + 1) .. B64:sub(c2 + 1, c2 + 1)
      .. (b and B64:sub(c3 + 1, c3 + 1) or "=") .. (c and B64:sub(c4 + 1, c4 + 1) or "=")
  end
  return table.concat(out)
end

--- regex_quote makes s match itself in Nova's name filter, which is a
--- regular expression.
function util.regex_quote(s)
  return (tostring(s):gsub("[%^%$%(%)%%%.%[%]%*%+%-%?{}|\\]", "\\%0"))
end

--- id_ok says whether s may go into a URL path as an id (Nova's UUIDs,
--- Rackspace's and other clouds' ids): no slashes, dots or spaces.
function util.id_ok(s)
  return type(s) == "string" and s:match("^[%w%-_]+$") ~= nil and #s <= 255
end

return util
