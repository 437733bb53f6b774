-- Tests for the Joyent provider, run by `loomd test plugins/joyent` (and by
-- `make test`). The HTTP fake below claims a CloudAPI host, so loom.http's
-- requests reach it on 127.0.0.1; its handlers keep a small machine store.
-- The Go tests (joyent_test.go) run the same plugin against a stricter Go
-- fake that verifies every request's HTTP Signature.

local PASSWORD = "s3cret-Triton-Passw0rd"
local API = "https://cloudapi.test-1.example.com"

local fields = {
  api_user = "loom",
  api_password = PASSWORD,
  joyent_api_url = API,
  poll_interval = "0.01",
  wait_for_ssh = false,
}

local machines, next_id

local function new_cloud()
  machines, next_id = {}, 1
  local fake = loom.test.http({ host = "cloudapi.test-1.example.com" })
  local basic = "Basic " .. require("loom.crypto").base64_encode("loom:" .. PASSWORD)
  local function authorized(req) return req.headers.authorization == basic end
  local function unauthorized() return { status = 401, json = { code = "InvalidCredentials", message = "The credentials provided are invalid" } } end
  fake:route("GET", "/loom/machines", function(req)
    if not authorized(req) then return unauthorized() end
    local out = {}
    for _, m in pairs(machines) do
      if m.state ~= "deleted" and m.tags.loom_node == req.query["tag.loom_node"] then out[#out + 1] = m end
    end
    return { json = out }
  end)
  fake:route("POST", "/loom/machines", function(req)
    if not authorized(req) then return unauthorized() end
    local id = ("%08x-0000-4000-8000-%012x"):format(next_id, next_id)
    next_id = next_id + 1
    local m = { id = id, name = req.json.name, package = req.json.package, image = req.json.image, state = "provisioning",
      ips = { "165.225.1.7", "10.88.1.7" }, primaryIp = "165.225.1.7",
      tags = { loom_node = req.json["tag.loom_node"], loom_cluster = req.json["tag.loom_cluster"] } }
    machines[id] = m
    return { status = 201, json = m }
  end)
  fake:route("GET", "/loom/machines/{id}", function(req)
    local m = machines[req.params.id]
    if m == nil then return { status = 404, json = { code = "ResourceNotFound", message = "not found" } } end
    m.state = "running"
    return { json = m }
  end)
  fake:route("DELETE", "/loom/machines/{id}", function(req)
    local m = machines[req.params.id]
    if m == nil then return { status = 404, json = { code = "ResourceNotFound", message = "not found" } } end
    m.state = "deleted"
    return 204
  end)
  return fake
end

local function live()
  local n = 0
  for _, m in pairs(machines) do if m.state ~= "deleted" then n = n + 1 end end
  return n
end

describe("a node's life", function()
  before_each(function() new_cloud() end)

  it("CREATE, CONFIRM and DELETE leave no machine behind", function()
    local c = loom.test.chain({ fields = fields, config = { flavor = "g4-highcpu-1G", image = "img-1" } })
    assert.truthy(c.ok, c.failed)
    assert.equals("165.225.1.7", c.config.ipaddresses.access_v4)
    assert.equals("10.88.1.7", c.config.ipaddresses.bind_v4)
    assert.equals(0, live())
  end)

  it("CREATE twice makes one machine", function()
    local a = loom.test.run("CREATE", { fields = fields, config = { flavor = "g4-highcpu-1G", image = "img-1" } })
    local b = loom.test.run("CREATE", { fields = fields, config = { flavor = "g4-highcpu-1G", image = "img-1" } })
    assert.equals(0, a.status, a.message)
    assert.equals(a.result.providerid, b.result.providerid)
    assert.equals(1, live())
  end)

  it("a wrong password is Coopr's 201, and stays out of the result", function()
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.api_password = "wrong-" .. PASSWORD
    local res = loom.test.run("CREATE", { fields = f, config = { flavor = "g4-highcpu-1G", image = "img-1" } })
    assert.equals(201, res.status)
    assert.matches("InvalidCredentials", res.message)
    assert.falsy(require("loom.json").encode(res):find(PASSWORD, 1, true))
  end)
end)

describe("the HTTP Signature of an ECDSA key", function()
  it("is ASN.1 DER: a SEQUENCE of two INTEGERs, a leading zero where the high bit is set", function()
    local der = require("lib.cloudapi").der_ecdsa(string.rep("\255", 32) .. string.rep("\0", 31) .. "\1")
    assert.equals(2 + 35 + 3, #der)
    assert.equals("\48\38\2\33\0", der:sub(1, 5))
    assert.equals("\2\1\1", der:sub(-3))
  end)
end)

describe("CONFIRM and the machine's sshd", function()
  before_each(function() new_cloud() end)

  local function created()
    local c = loom.test.run("CREATE", { fields = fields, config = { flavor = "g4-highcpu-1G", image = "img-1" } })
    assert.equals(0, c.status, c.message)
    return c.result.providerid
  end

  local function waiting(extra)
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.wait_for_ssh, f.poll_interval = true, "5"
    for k, v in pairs(extra or {}) do f[k] = v end
    return f
  end

  it("records the host keys sshd presents at the access address", function()
    local host = loom.test.ssh({ host = "165.225.1.7" })
    local res = loom.test.run("CONFIRM", { fields = waiting(), providerid = created() })
    assert.equals(0, res.status, res.message)
    assert.same({ ed25519 = host.host_key }, res.result.ssh_host_keys)
  end)

  it("succeeds with a warning when sshd never answers within ssh_wait", function()
    local id = created()
    local before = #loom.test.clock.sleeps()
    local res, logs = loom.test.run("CONFIRM", { fields = waiting({ ssh_wait = 60 }), providerid = id })
    assert.equals(0, res.status, res.message)
    assert.is_nil(res.result and res.result.ssh_host_keys)
    local text = table.concat(logs, "\n")
    assert.contains("no SSH host keys: ssh.wait_host_keys: sshd on 165.225.1.7:22", text)
    assert.contains("within 1m0s (timeout): 12 attempts", text)
    assert.contains("CONFIRM succeeds without ssh_host_keys", text)
    -- Twelve attempts 5 s apart on the virtual clock (which also moves
    -- with the real time the attempts take): about 60 s, never more.
    local waited, sleeps = 0, loom.test.clock.sleeps()
    for i = before + 1, #sleeps do
      assert.truthy(sleeps[i] <= 5, "a pause longer than poll_interval: " .. sleeps[i])
      waited = waited + sleeps[i]
    end
    assert.truthy(waited > 55 and waited <= 60, "paused " .. waited .. " s in all")
  end)
end)
