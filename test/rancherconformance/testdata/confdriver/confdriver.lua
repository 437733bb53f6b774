-- confdriver: a cluster driver that defines every hook of the contract,
-- for the conformance test against kontainer-engine's own client. Its
-- "cloud" is one JSON file per cluster in the work dir, which outlives
-- the driver process as a real cloud would; cluster_info.metadata.state
-- holds the cluster id, the only thing a call needs from earlier calls.
local loom = require("loom")
local fs = require("loom.fs")
local json = require("loom.json")

local ConfDriver = loom.ClusterDriver:extend("ConfDriver")

local flags = {
  zone = { type = "string", usage = "zone", default = "z1" },
  secret = { type = "string", usage = "API secret", password = true },
  ["node-count"] = { type = "int", usage = "number of nodes", default = 3 },
  ["max-nodes"] = { type = "intPtr", usage = "autoscaling limit" },
  private = { type = "bool", usage = "private endpoint", default = true },
  autoscale = { type = "boolPtr", usage = "autoscaling" },
  tags = { type = "stringSlice", usage = "k=v tags", default = { "team=a" } },
}

function ConfDriver:create_options() return flags end

function ConfDriver:update_options() return { ["node-count"] = flags["node-count"] } end

local function path(id) return "clusters/" .. id .. ".json" end

local function save(c)
  fs.mkdir("clusters")
  fs.write(path(c.id), json.encode(c))
end

-- limits reads the pointer flags: nil (Go's nil pointer) when Rancher sent
-- no value, which a driver must tell apart from 0 and false.
function ConfDriver:limits(o)
  local max, auto = self:option(o, "intPtr", "maxNodes", "max-nodes"), self:option(o, "boolPtr", "autoscale")
  return ("max=%s autoscale=%s"):format(max == nil and "unset" or tostring(max), auto == nil and "unset" or tostring(auto))
end

-- cluster loads the cluster cluster_info names, or fails.
function ConfDriver:cluster(ci)
  local id = self:state(ci).id
  if not id then self:fail("cluster_info names no cluster (metadata.state has no id)", "terminal") end
  -- A plain error (class retry): Rancher's client shows the bare message.
  if not fs.exists(path(id)) then error("cluster " .. id .. " does not exist", 0) end
  return json.decode(fs.read(path(id)))
end

local function info(ci, c)
  ci.endpoint = "api." .. c.id .. ".example" -- no scheme: Rancher adds https://
  ci.version, ci.node_count, ci.status = c.version, c.nodes, c.status
  ci.metadata = ci.metadata or {}
  ci.metadata.limits = c.limits
  ci.root_ca_certificate = "Q0E="
  return ci
end

function ConfDriver:create(req)
  local o = req.options
  local name = self:option(o, "string", "name")
  if name == "" then self:fail("options.string.name is missing", "terminal") end
  local ci = req.cluster_info or {}
  local id = self:state(ci).id
  local c = id and fs.exists(path(id)) and json.decode(fs.read(path(id)))
  if not c then
    local nodes = self:option(o, "int", "nodeCount", "node-count")
    c = {
      id = "cl-" .. name, nodes = nodes ~= 0 and nodes or 3, version = "1.30", status = "PROVISIONING",
      zone = self:option(o, "string", "zone"), tags = self:option(o, "string_slice", "tags"), tokens = 0,
      snapshots = {}, limits = self:limits(o),
    }
    save(c)
    self:set_state(ci, { id = c.id })
    if name == "half" then
      -- Fails half way: Rancher keeps ci, and the retry finds the cluster.
      return ci, "provisioning " .. c.id .. " stalled"
    end
  end
  c.status = "RUNNING"
  save(c)
  return info(ci, c)
end

function ConfDriver:update(req)
  local c = self:cluster(req.cluster_info)
  local n = self:option(req.options, "int", "nodeCount", "node-count")
  if n ~= 0 then c.nodes = n end
  c.limits = self:limits(req.options)
  save(c)
  return info(req.cluster_info, c)
end

function ConfDriver:post_check(req)
  local c = self:cluster(req.cluster_info)
  c.tokens = c.tokens + 1
  save(c)
  local ci = info(req.cluster_info, c)
  ci.service_account_token = "sa-" .. c.id .. "-" .. c.tokens
  return ci
end

function ConfDriver:remove(req)
  local id = self:state(req.cluster_info).id
  if id then fs.remove(path(id)) end -- gone already is fine
end

function ConfDriver:get_version(req) return { version = self:cluster(req.cluster_info).version } end

function ConfDriver:set_version(req)
  local c = self:cluster(req.cluster_info)
  c.version = req.version
  save(c)
end

function ConfDriver:get_cluster_size(req) return { count = self:cluster(req.cluster_info).nodes } end

function ConfDriver:set_cluster_size(req)
  local c = self:cluster(req.cluster_info)
  c.nodes = req.count
  save(c)
end

function ConfDriver:etcd_save(req)
  local c = self:cluster(req.cluster_info)
  c.snapshots[req.snapshot_name] = { version = c.version, nodes = c.nodes }
  save(c)
end

function ConfDriver:etcd_restore(req)
  local c = self:cluster(req.cluster_info)
  local s = c.snapshots[req.snapshot_name]
  if not s then self:fail("cluster " .. c.id .. " has no snapshot " .. req.snapshot_name, "terminal") end
  c.version, c.nodes = s.version, s.nodes
  save(c)
  return info(req.cluster_info, c)
end

function ConfDriver:etcd_remove_snapshot(req)
  local c = self:cluster(req.cluster_info)
  c.snapshots[req.snapshot_name] = nil
  save(c)
end

function ConfDriver:k8s_capabilities(req)
  return {
    l4_load_balancer = { enabled = true, provider = "conf", protocols_supported = { "TCP" }, health_check_supported = false },
    ingress_controllers = { { ingress_provider = "nginx", custom_default_backend = true } },
    node_pool_scaling_supported = true,
    node_port_range = "30000-32767",
  }
end

function ConfDriver:remove_legacy_service_account(req)
  self:cluster(req.cluster_info) -- nothing to remove, but the cluster must exist
end

return ConfDriver
