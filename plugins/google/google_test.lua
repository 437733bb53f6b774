-- Tests for the google provider, run by `loomd test plugins/google` (and by
-- `make test`). The plugin runs as shipped: its real URLs
-- (https://oauth2.googleapis.com/token, https://compute.googleapis.com)
-- and its permissions.http allow-list. The HTTP fakes below claim those
-- hosts. (The Go tests run the plugin against a stricter fake that checks
-- every request and answer against Google's discovery document and
-- verifies the JWT's signature: internal/cloudfake/gcefake.)

local crypto = require("loom.crypto")
local json = require("loom.json")

local EMAIL = "loom@loom-test.iam.gserviceaccount.com"
local ZONE = "us-central1-a"
local BASE = "/compute/v1/projects/loom-test/zones/" .. ZONE

-- The service account's key: an RSA key in the api_keys resource (the
-- JSON key's private_key works the same way).
local sa_key = crypto.generate_key({ type = "rsa", bits = 2048, path = "api_keys/sa.pem" })

local fields = {
  google_project = "loom-test",
  google_client_email = EMAIL,
  api_key_resource = "sa.pem",
  zone_name = ZONE,
  ssh_user = "coopr",
  google_data_disk_size_gb = "0",
  poll_interval = "3",
  host_key_wait = "30",
  wait_for_ssh = false,
}

local HOST_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIJb0W8wXq2cCz5S5WzvZ0m1Q8u3iQq7Bf8rj1T1m2f0x"

local oauth, compute, instances, ops, requests, issued, lose_next

local function claims_of(assertion)
  local h, c = assertion:match("^([^.]+)%.([^.]+)%.[^.]+$")
  return json.decode(crypto.base64url_decode(h)), json.decode(crypto.base64url_decode(c))
end

local function gerror(status, reason, message)
  return { status = status, json = { error = { code = status, message = message,
    errors = { { reason = reason, domain = "global", message = message } } } } }
end

local function op_json(op)
  return { kind = "compute#operation", id = op.id, name = op.name, status = op.status, operationType = op.type,
    targetLink = "https://compute.googleapis.com" .. BASE .. "/instances/" .. op.target, zone = ZONE }
end

local function instance_json(i)
  local out = { kind = "compute#instance", id = i.id, name = i.name, status = i.status, labels = i.labels,
    networkInterfaces = { { networkIP = "10.128.0.7", accessConfigs = { { name = "External NAT", type = "ONE_TO_ONE_NAT", natIP = "34.70.0.7" } } } } }
  return out
end

-- new_fakes opens the token endpoint and Compute Engine: an instance is
-- PROVISIONING on its first read, then RUNNING; an operation RUNNING on
-- its first read, then DONE.
local function new_fakes()
  instances, ops, requests, issued, lose_next = {}, {}, {}, {}, {}
  oauth = loom.test.http({ host = "oauth2.googleapis.com" })
  oauth:route("POST", "/token", function(req)
    local assertion = req.body:match("assertion=([^&]+)")
    local header, claims = claims_of(assertion)
    assert.equals("RS256", header.alg)
    if claims.iss ~= EMAIL then
      return { status = 401, json = { error = "invalid_client", error_description = "The OAuth client was not found." } }
    end
    assert.equals("https://oauth2.googleapis.com/token", claims.aud)
    assert.equals("https://www.googleapis.com/auth/compute", claims.scope)
    local token = "ya29.test-" .. (#issued + 1)
    issued[#issued + 1] = token
    return { json = { access_token = token, expires_in = 3599, token_type = "Bearer" } }
  end)

  compute = loom.test.http({ host = "compute.googleapis.com" })
  local function authorized(req)
    for _, t in ipairs(issued) do
      if req.headers.authorization == "Bearer " .. t then return true end
    end
    return false
  end
  local function new_op(typ, target, done)
    local op = { id = tostring(7000 + #ops + 1), name = "operation-" .. (#ops + 1), status = "PENDING", type = typ, target = target, reads = 0, done = done }
    ops[op.name] = op
    ops[#ops + 1] = op
    return op
  end
  compute:route("POST", BASE .. "/instances", function(req)
    if not authorized(req) then return gerror(401, "authError", "Request had invalid authentication credentials.") end
    local rid = req.query.requestId
    if requests[rid] then return { json = op_json(requests[rid]) } end
    local body = req.json
    if instances[body.name] then return gerror(409, "alreadyExists", "already exists") end
    instances[body.name] = { id = tostring(4000 + #ops), name = body.name, status = "PROVISIONING", labels = body.labels, reads = 0, body = body }
    local op = new_op("insert", body.name)
    requests[rid] = op
    if lose_next.insert then
      lose_next.insert = nil
      return { drop = true }
    end
    return { json = op_json(op) }
  end)
  compute:route("GET", BASE .. "/instances/{name}", function(req)
    if not authorized(req) then return gerror(401, "authError", "Request had invalid authentication credentials.") end
    local i = instances[req.params.name]
    if not i then return gerror(404, "notFound", "The resource 'instances/" .. req.params.name .. "' was not found") end
    i.reads = i.reads + 1
    if i.reads > 1 then i.status = "RUNNING" end
    return { json = instance_json(i) }
  end)
  compute:route("GET", BASE .. "/instances/{name}/getGuestAttributes", function(req)
    local i = instances[req.params.name]
    assert.equals("hostkeys/", req.query.queryPath)
    return { json = { kind = "compute#guestAttributes", queryPath = "hostkeys/",
      queryValue = { items = { { namespace = "hostkeys", key = "ssh-ed25519", value = HOST_KEY } } } } }
  end)
  compute:route("DELETE", BASE .. "/instances/{name}", function(req)
    local name = req.params.name
    if not instances[name] then return gerror(404, "notFound", "The resource 'instances/" .. name .. "' was not found") end
    return { json = op_json(new_op("delete", name, function() instances[name] = nil end)) }
  end)
  compute:route("GET", BASE .. "/operations/{op}", function(req)
    local op = ops[req.params.op]
    op.reads = op.reads + 1
    op.status = op.reads > 1 and "DONE" or "RUNNING"
    if op.status == "DONE" and op.done then op.done(); op.done = nil end
    return { json = op_json(op) }
  end)
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

describe("CREATE", function()
  before_each(new_fakes)

  it("inserts an instance with a service account token, and waits for its operation", function()
    local res = loom.test.run("CREATE", { fields = fields, node = "node-7", hostname = "web1.example.com",
      config = { flavor = "e2-small", image = "debian-12" } })
    assert.equals(0, res.status, res.message)
    assert.equals("web1", res.result.providerid)
    local post = compute:assert_called("POST", BASE .. "/instances", 1)[1]
    assert.equals("zones/us-central1-a/machineTypes/e2-small", post.json.machineType)
    assert.equals("node-7", post.json.labels["coopr-node"])
    assert.equals("projects/debian-cloud/global/images/family/debian-12", post.json.disks[1].initializeParams.sourceImage)
    assert.matches("^%x+%-%x+%-5%x+%-[89ab]%x+%-%x+$", post.query.requestId)
    assert.matches("^coopr:ssh%-ed25519 ", post.json.metadata.items[1].value)
    assert.equals("Bearer ya29.test-1", post.headers.authorization)
    oauth:assert_called("POST", "/token", 1)
    assert.equals("DONE", ops[1].status)
  end)

  it("finds the node's instance again instead of inserting a second one", function()
    loom.test.run("CREATE", { fields = fields })
    local again = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, again.status, again.message)
    compute:assert_called("POST", BASE .. "/instances", 1)
  end)

  it("sends the same requestId after a lost answer and gets the same operation", function()
    lose_next.insert = true
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status, res.message)
    local posts = compute:assert_called("POST", BASE .. "/instances", 2)
    assert.equals(posts[1].query.requestId, posts[2].query.requestId)
    assert.equals(1, count(instances))
  end)

  it("waits out 429 on the virtual clock", function()
    compute:fail_next({ method = "POST", path = BASE .. "/instances", status = 429, times = 2,
      headers = { ["Retry-After"] = "4" }, json = { error = { code = 429, message = "Rate Limit Exceeded",
        errors = { { reason = "rateLimitExceeded", domain = "global", message = "Rate Limit Exceeded" } } } } })
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status, res.message)
    local sleeps = loom.test.clock.sleeps()
    assert.equals(4, sleeps[1])
    assert.equals(4, sleeps[2])
    assert.equals(1, count(instances))
  end)

  it("returns 201 (nothing created) for a service account Google refuses", function()
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.google_client_email = "nobody@loom-test.iam.gserviceaccount.com"
    local res = loom.test.run("CREATE", { fields = f })
    assert.equals(201, res.status)
    assert.matches("invalid_client", res.message)
    compute:assert_not_called("POST", BASE .. "/instances")
  end)

  it("keeps the key and the token out of the result and the logs", function()
    local res, logs = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status, res.message)
    local all = json.encode(res) .. table.concat(logs, "\n")
    assert.falsy(all:find("ya29.test", 1, true))
    assert.falsy(all:find("PRIVATE KEY", 1, true))
    assert.falsy(tostring(sa_key):find("PRIVATE", 1, true))
  end)
end)

describe("CONFIRM", function()
  before_each(new_fakes)

  it("waits until the instance runs, and reads its host key from the guest attributes", function()
    local c = loom.test.run("CREATE", { fields = fields })
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = c.result.providerid })
    assert.equals(0, res.status, res.message)
    assert.same({ access_v4 = "34.70.0.7", bind_v4 = "10.128.0.7" }, res.ipaddresses)
    assert.same({ ed25519 = HOST_KEY }, res.result.ssh_host_keys)
  end)

  it("fails for an instance that does not exist", function()
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = "gone-1" })
    assert.equals(1, res.status)
    assert.matches("has no instance gone%-1", res.message)
  end)
end)

describe("a node's life", function()
  before_each(new_fakes)

  it("CREATE, CONFIRM and DELETE leave no instance behind", function()
    local c = loom.test.chain({ fields = fields })
    assert.truthy(c.ok, c.failed)
    assert.equals(0, count(instances))
  end)

  it("DELETE of an instance that is gone succeeds", function()
    local res = loom.test.run("DELETE", { fields = fields, providerid = "gone-1" })
    assert.equals(0, res.status, res.message)
  end)
end)
