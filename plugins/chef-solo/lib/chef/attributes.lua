-- The JSON attributes of a chef-solo run, built exactly as Coopr's
-- ChefSoloAutomator#generate_chef_json_attributes built them:
--
--   servicedata = JSON.parse(json_attributes)          (the service action's)
--   clusterdata = config.cluster
--   clusterdata.deeper_merge!(servicedata)             (deep_merge gem 1.x:
--                                                       the service wins)
--   clusterdata['nodes'] = config.nodes
--   servicedata['coopr'] = {cluster = clusterdata, services = config.services,
--                           hostname, clusterId, ipaddresses}
--   servicedata.merge!(clusterdata)                    (top level, shallow)
--
-- The result is the merged cluster data at the top level (nodes included)
-- plus the coopr block, unless the merged data itself has a "coopr" key:
-- the shallow merge then replaced Coopr's block with it, and so does this.
--
-- deep_merge's rules (DeepMerge.deep_merge! with preserve_unmergeables
-- false, the gem's deeper_merge!):
--   * a null source value changes nothing (JSON null decodes to nil here,
--     which is the same);
--   * a destination that is nil or false is replaced by the source;
--   * hash into hash merges key by key; a key the destination lacks (or
--     holds false) gets a copy of the source value in which every array
--     is de-duplicated (the gem merges the value into its own dup, and
--     a | a is a without repeats);
--   * hash into anything else replaces it, except an empty hash, which
--     changes nothing (the gem loops over no keys);
--   * array into array is the union dest | source: dest's elements first,
--     repeats removed, then the source's new ones;
--   * anything else replaces the destination.
-- One difference that cannot be helped: when a hash replaces a scalar, the
-- gem leaves its first key's arrays with their repeats (it merges the
-- later keys into the hash itself); Lua tables have no key order, so every
-- key's arrays are de-duplicated.

local json = require("loom.json")

local attributes = {}

local ARRAY_MT = getmetatable(json.array())

--- is_array says whether a decoded JSON value is an array.
function attributes.is_array(v)
  if type(v) ~= "table" then return false end
  if ARRAY_MT ~= nil and getmetatable(v) == ARRAY_MT then return true end
  local n = #v
  if n == 0 then return false end
  local count = 0
  for _ in pairs(v) do count = count + 1 end
  return count == n
end

local is_array = attributes.is_array

local function is_hash(v)
  return type(v) == "table" and not is_array(v)
end

local function truthy(v)
  return v ~= nil and v ~= false
end

-- key is a value's identity for Ruby's eql? in Array#|: its canonical JSON.
local function key(v)
  return json.encode(v)
end

-- union is Ruby's dest | source.
local function union(dest, source)
  local out, seen = json.array(), {}
  for _, list in ipairs({ dest, source }) do
    for _, v in ipairs(list) do
      local k = key(v)
      if not seen[k] then
        seen[k] = true
        out[#out + 1] = v
      end
    end
  end
  return out
end

-- copy_dedup is deep_merge!(v, v.dup): hashes copied key by key, arrays
-- de-duplicated (their elements as they are).
local function copy_dedup(v)
  if is_array(v) then return union(v, {}) end
  if is_hash(v) then
    local out = {}
    for k, x in pairs(v) do out[k] = copy_dedup(x) end
    return out
  end
  return v
end

-- deep_copy copies a decoded JSON value (the task's config is not changed).
local function deep_copy(v)
  if type(v) ~= "table" then return v end
  local out = is_array(v) and json.array() or {}
  for k, x in pairs(v) do out[k] = deep_copy(x) end
  return out
end

--- deep_merge merges source into dest as the deep_merge gem does, and
--- returns the new dest (dest itself, changed, when both are hashes).
function attributes.deep_merge(source, dest)
  if source == nil then return dest end
  if not truthy(dest) then return source end
  if is_hash(source) then
    if not is_hash(dest) then
      if next(source) == nil then return dest end
      return copy_dedup(source)
    end
    for k, v in pairs(source) do
      if truthy(dest[k]) then
        dest[k] = attributes.deep_merge(v, dest[k])
      else
        dest[k] = attributes.deep_merge(v, copy_dedup(v))
      end
    end
    return dest
  end
  if is_array(source) then
    if is_array(dest) then return union(dest, source) end
    return source
  end
  return source
end

--- build returns the attributes table of a run: task is the Coopr task,
--- json_attributes the service action's field (a JSON object as text, or
--- empty). It raises {kind = "config"} when json_attributes is not a JSON
--- object.
function attributes.build(task, json_attributes)
  local config = task.config or {}
  local text = json_attributes
  if text == nil or text == "" then text = "{}" end
  local service
  if type(text) == "table" then
    service = text -- a loomd spec may give the object itself
  else
    local ok, doc = pcall(json.decode, tostring(text))
    if not ok then
      error({ kind = "config", message = "json_attributes is not valid JSON: " .. tostring(type(doc) == "table" and doc.message or doc) }, 0)
    end
    service = doc
  end
  if service == nil then service = {} end
  if not is_hash(service) then
    error({ kind = "config", message = "json_attributes must be a JSON object ({...}), not " .. (is_array(service) and "an array" or type(service)) }, 0)
  end
  local cluster = config.cluster
  if not is_hash(cluster) then cluster = {} end
  cluster = attributes.deep_merge(service, deep_copy(cluster))
  cluster.nodes = config.nodes or {}
  local out = {}
  for k, v in pairs(cluster) do out[k] = v end
  if cluster.coopr == nil then
    out.coopr = {
      cluster = cluster,
      services = config.services or {},
      hostname = config.hostname,
      clusterId = task.clusterId,
      ipaddresses = config.ipaddresses,
    }
  end
  return out
end

return attributes
