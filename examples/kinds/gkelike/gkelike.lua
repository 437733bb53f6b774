-- gkelike: a Rancher kontainer-engine cluster driver for a managed
-- Kubernetes API (clusters you create, resize and delete over HTTP).
--
-- Every call is a new process for Rancher, so the driver keeps nothing in
-- memory: what later calls need (the cluster id, the API URL and token)
-- goes into cluster_info.metadata.state (self:set_state / self:state).
local loom = require("loom")
local http = require("loom.http")

local GkeLike = loom.ClusterDriver:extend("GkeLike")

local flags = {
  ["api-url"] = { type = "string", usage = "the managed-Kubernetes API, e.g. https://k8s.example.com/v1" },
  ["api-token"] = { type = "string", usage = "API token", password = true },
  ["node-count"] = { type = "int", usage = "number of nodes", default = 3 },
  ["kubernetes-version"] = { type = "string", usage = "Kubernetes version", default = "1.30" },
  ["labels"] = { type = "stringSlice", usage = "k=v labels for the cluster" },
}

function GkeLike:create_options() return flags end

function GkeLike:update_options()
  return { ["node-count"] = flags["node-count"], ["kubernetes-version"] = flags["kubernetes-version"] }
end

-- api sends one request; a 4xx/5xx becomes an error with the API's message.
local function api(st, method, path, body)
  local resp = http.request(method, st.api_url .. path, { bearer = st.token, json = body, retries = 2 })
  if resp.status == 404 then return nil, 404 end
  if not resp.ok then
    local msg = (resp:json() or {}).error or resp.body
    error({ class = resp.status >= 500 and "retry" or "terminal", message = ("%s %s: %d %s"):format(method, path, resp.status, msg) })
  end
  return resp:json(), resp.status
end

-- settings reads the options under their flag names or Rancher's
-- lowerCamel schema names.
function GkeLike:settings(o)
  local s = {
    api_url = self:option(o, "string", "api-url", "apiUrl"),
    token = self:option(o, "string", "api-token", "apiToken"),
    name = self:option(o, "string", "name"),
    nodes = self:option(o, "int", "node-count", "nodeCount"),
    version = self:option(o, "string", "kubernetes-version", "kubernetesVersion"),
    labels = self:option(o, "string_slice", "labels"),
  }
  return s
end

function GkeLike:create(req)
  local s = self:settings(req.options)
  if s.api_url == "" then return nil, { class = "terminal", message = "api-url is required" } end
  if s.name == "" then return nil, { class = "terminal", message = "the cluster name (options.string.name) is missing" } end
  if s.nodes == 0 then s.nodes = flags["node-count"].default end
  if s.version == "" then s.version = flags["kubernetes-version"].default end
  -- A retried create (cluster_info set) reuses the cluster it started.
  local st = self:state(req.cluster_info)
  st.api_url, st.token = s.api_url, s.token
  local ci = req.cluster_info or {}
  if not st.id then
    local body = api(st, "POST", "/clusters", { name = s.name, nodeCount = s.nodes, version = s.version, labels = s.labels })
    st.id = body.id
  end
  self:set_state(ci, st)
  local c = api(st, "GET", "/clusters/" .. st.id)
  if c.status == "ERROR" then
    -- Partial: Rancher keeps ci (and the id in it) for the retry.
    return ci, "cluster " .. st.id .. " failed to provision: " .. tostring(c.message)
  end
  ci.endpoint, ci.version, ci.node_count, ci.status = c.endpoint, c.version, c.nodeCount, c.status
  ci.root_ca_certificate = c.caCert
  return ci
end

function GkeLike:update(req)
  local ci, st = req.cluster_info, self:state(req.cluster_info)
  local s = self:settings(req.options)
  local body = {}
  if s.nodes ~= 0 then body.nodeCount = s.nodes end
  if s.version ~= "" then body.version = s.version end
  local c = api(st, "PUT", "/clusters/" .. st.id, body)
  ci.node_count, ci.version = c.nodeCount, c.version
  return ci
end

function GkeLike:post_check(req)
  local ci, st = req.cluster_info, self:state(req.cluster_info)
  local c = api(st, "GET", "/clusters/" .. st.id)
  if c.status ~= "RUNNING" then
    return nil, ("cluster %s is %s, not RUNNING yet"):format(st.id, tostring(c.status))
  end
  -- Re-runnable: Rancher calls post_check again to regenerate the token.
  local tok = api(st, "POST", "/clusters/" .. st.id .. "/serviceAccountToken", {})
  ci.endpoint, ci.root_ca_certificate, ci.service_account_token = c.endpoint, c.caCert, tok.token
  return ci
end

function GkeLike:remove(req)
  local st = self:state(req.cluster_info)
  if not st.id then return end -- never created
  api(st, "DELETE", "/clusters/" .. st.id) -- a 404 means already gone
end

function GkeLike:get_version(req)
  local st = self:state(req.cluster_info)
  return { version = api(st, "GET", "/clusters/" .. st.id).version }
end

function GkeLike:get_cluster_size(req)
  local st = self:state(req.cluster_info)
  return { count = api(st, "GET", "/clusters/" .. st.id).nodeCount }
end

function GkeLike:set_cluster_size(req)
  local st = self:state(req.cluster_info)
  api(st, "PUT", "/clusters/" .. st.id, { nodeCount = req.count })
end

function GkeLike:k8s_capabilities(req)
  return {
    l4_load_balancer = { enabled = true, provider = "gkelike", protocols_supported = { "TCP", "UDP" }, health_check_supported = true },
    node_pool_scaling_supported = true,
  }
end

return GkeLike
