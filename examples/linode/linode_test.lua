-- Tests for the Linode provider, run by `loomd test` (docs/testing.md).
--
-- Offline (the default): a fake of Linode's API v4 in Lua handlers, spies
-- and stubs on the plugin's own code, the virtual clock. The tests tagged
-- #acceptance run against the real API with `loomd test --acceptance` and
-- LINODE_TOKEN and LINODE_ROOT_PASS set (LINODE_API_URL for a stand-in);
-- offline they replay testdata/linode_test.cassette.json.

local client = require("lib.linode.client")

local TOKEN = "test-token-0123456789"
local ROOT = "root-pass-0123456789"
local fields = { api_token = TOKEN, root_pass = ROOT }

local api, linodes, next_id

-- fake_api is an in-memory Linode: the instance shapes, X-Filter, and the
-- {"errors": [...]} answers of the real API.
local function fake_api()
  linodes, next_id = {}, 41000000
  local fake = loom.test.http({ host = "api.linode.com" })
  fake:route("GET", "/v4/linode/instances", function(req)
    assert.equals("Bearer " .. TOKEN, req.headers.authorization)
    local filter = require("loom.json").decode(req.headers["x-filter"] or "{}")
    local data = {}
    for _, l in pairs(linodes) do
      local want = filter.label
      if want == nil or want == l.label or (type(want) == "table" and l.label:find(want["+contains"], 1, true)) then
        data[#data + 1] = l
      end
    end
    return { json = { data = data, page = 1, pages = 1, results = #data } }
  end)
  fake:route("POST", "/v4/linode/instances", function(req)
    next_id = next_id + 1
    local l = { id = next_id, label = req.json.label, region = req.json.region, type = req.json.type,
      image = req.json.image, status = "provisioning", ipv4 = { "203.0.113.7", "192.168.130.7" } }
    linodes[l.id] = l
    return { json = l }
  end)
  fake:route("GET", "/v4/linode/instances/{id}", function(req)
    local l = linodes[tonumber(req.params.id)]
    if l == nil then return { status = 404, json = { errors = { { reason = "Not found" } } } } end
    local answer = { json = { id = l.id, label = l.label, status = l.status, ipv4 = l.ipv4 } }
    l.status = l.status == "provisioning" and "booting" or "running"
    return answer
  end)
  fake:route("DELETE", "/v4/linode/instances/{id}", function(req)
    local id = tonumber(req.params.id)
    if linodes[id] == nil then return { status = 404, json = { errors = { { reason = "Not found" } } } } end
    linodes[id] = nil
    return { json = {} }
  end)
  return fake
end

-- offline is describe with the fake API open around each test (the
-- acceptance tests below reach the real one).
local function offline(name, fn)
  describe(name, function()
    before_each(function() api = fake_api() end)
    fn()
  end)
end

offline("CREATE", function()
  it("creates an instance labelled for the node, and returns its id and root login", function()
    local res = loom.test.run("CREATE", { fields = fields, hostname = "web1.example.com",
      config = { flavor = "g6-nanode-1", image = "linode/debian12" } })
    assert.equals(0, res.status, res.message)
    assert.equals("41000001", res.result.providerid)
    assert.same({ user = "root", password = ROOT }, res.result["ssh-auth"])
    local post = api:assert_called("POST", "/v4/linode/instances", 1)[1]
    assert.same({ label = "web1.example.com", region = "us-east", type = "g6-nanode-1", image = "linode/debian12",
      root_pass = ROOT, tags = { "loom" } }, post.json)
  end)

  it("reuses the node's instance when the task is retried", function()
    local c = loom.test.chain({ fields = fields, steps = { "CREATE" }, idempotent = true })
    assert.is_true(c.ok, c.failed)
    assert.same({}, c.changes)
    api:assert_called("POST", "/v4/linode/instances", 1)
  end)

  it("fails with Linode's reasons", function()
    api:fail_next({ method = "POST", path = "/v4/linode/instances", status = 400,
      json = { errors = { { field = "type", reason = "A valid plan type is required" } } } })
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(1, res.status)
    assert.equals("Linode: POST /linode/instances: HTTP 400: type: A valid plan type is required", res.message)
  end)

  it("waits out two 429s with Retry-After on the virtual clock, within timeouts.create", function()
    -- The deadline is linode.json's 5m, not loomd test's --timeout.
    api:fail_next({ method = "GET", path = "/v4/linode/instances", status = 429, times = 2,
      headers = { ["Retry-After"] = "20" }, json = { errors = { { reason = "Too many requests" } } } })
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status, res.message)
    assert.same({ 20, 20 }, loom.test.clock.sleeps())
  end)

  it("needs an API token and a root password", function()
    local res = loom.test.run("CREATE")
    assert.matches("missing required admin fields", res.message)
  end)

  it("keeps the token and the root password out of messages and logs", function()
    api:fail_next({ method = "POST", status = 500, body = "internal error for " .. TOKEN })
    local res, logs = loom.test.run("CREATE", { fields = fields })
    assert.equals(1, res.status)
    assert.is_nil(res.message:find(TOKEN, 1, true))
    for _, line in ipairs(logs) do
      assert.is_nil(line:find(TOKEN, 1, true), line)
      assert.is_nil(line:find(ROOT, 1, true), line)
    end
  end)
end)

offline("CONFIRM", function()
  it("waits until the instance runs, then reports its public and private addresses", function()
    local made = loom.test.run("CREATE", { fields = fields })
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = made.result.providerid })
    assert.equals(0, res.status, res.message)
    assert.same({ access_v4 = "203.0.113.7", bind_v4 = "192.168.130.7" }, res.ipaddresses)
    -- provisioning, booting, running: two 5 s waits, on the virtual clock.
    assert.same({ 5, 5 }, loom.test.clock.sleeps())
  end)

  it("fails when the instance is gone", function()
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = "999" })
    assert.equals(1, res.status)
    assert.equals("not_found", res.error.kind)
  end)
end)

-- The hooks run in the test's VM: a spy or a stub on the plugin's tables
-- (the entry table, its modules) is what the hooks call.
offline("with spies and stubs", function()
  it("CREATE looks the node's instance up before making one", function()
    local find = spy.on(client, "find")
    local req = spy.on(client, "request")
    loom.test.run("CREATE", { fields = fields, hostname = "db1" })
    assert.spy(find).was.called_with(match.is_table(), "db1")
    assert.spy(req).was.called_with(match.is_table(), "POST", "/linode/instances", match.is_table())
    -- find ran first: its GET is the first request.
    assert.equals("GET", req.calls[1].vals[2])
  end)

  it("DELETE of an instance already gone succeeds", function()
    local req = stub(client, "request").returns(nil, 404)
    local res = loom.test.run("DELETE", { fields = fields, providerid = "41000099" })
    assert.equals(0, res.status, res.message)
    assert.stub(req).was.called_with(match._, "DELETE", "/linode/instances/41000099")
  end)

  it("DELETE without a providerid finds the node's instance by its label", function()
    local find = stub(client, "find").returns({ id = 41000042, label = "node1.example.com" })
    local req = stub(client, "request").returns({}, 200)
    local res = loom.test.run("DELETE", { fields = fields })
    assert.equals(0, res.status, res.message)
    assert.stub(find).was.called_with(match._, "node1.example.com")
    assert.stub(req).was.called_with(match._, "DELETE", "/linode/instances/41000042")
  end)

  it("CONFIRM reports what addresses() makes of the instance", function()
    stub(LinodeProvider, "addresses").returns({ access_v4 = "198.51.100.1", bind_v4 = "10.0.0.1" })
    local made = loom.test.run("CREATE", { fields = fields })
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = made.result.providerid })
    assert.same({ access_v4 = "198.51.100.1", bind_v4 = "10.0.0.1" }, res.ipaddresses)
  end)

  it("a 5xx from the API fails the task with the API's reason", function()
    stub(client, "request").invokes(function()
      error({ kind = "api", status = 503, message = "Linode: GET /linode/instances: HTTP 503: Service Unavailable" }, 0)
    end)
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(1, res.status)
    assert.equals("api", res.error.kind)
    assert.matches("HTTP 503", res.message)
  end)

  it("labels follow Linode's rules", function()
    assert.equals("web1.example.com", client.label("web1.example.com"))
    assert.equals("a-b_c.d", client.label("a--b__c..d"))
    assert.equals("node-x", client.label("x"))
    assert.equals(64, #client.label(("a"):rep(80)))
  end)
end)

offline("a node's life", function()
  it("CREATE, CONFIRM and DELETE, each run twice as Coopr retries them, leave no instance behind", function()
    local c = loom.test.chain({ fields = fields, config = { flavor = "g6-nanode-1", image = "linode/debian12" }, idempotent = true })
    assert.is_true(c.ok, c.failed)
    assert.same({}, c.changes)
    assert.equals("203.0.113.7", c.config.ipaddresses.access_v4)
    assert.is_nil(next(linodes))
  end)
end)

-- Acceptance: the same life against Linode's real API (or a stand-in:
-- LINODE_API_URL=http://127.0.0.1:PORT/v4), with loomd test --acceptance.
local acc = loom.test.acceptance({
  env = { "LINODE_TOKEN", "LINODE_ROOT_PASS" },
  optional = { LINODE_API_URL = "https://api.linode.com/v4", LINODE_REGION = "us-east",
    LINODE_TYPE = "g6-nanode-1", LINODE_IMAGE = "linode/debian12" },
  hosts = { "api.linode.com" },
  -- The sweeper deletes every instance a run of these tests made (their
  -- labels carry acc.prefix), whatever the tests did; loomd test --sweep
  -- runs it alone, for what any run left (s.prefix is then "loomacc-").
  sweeper = function(s)
    local f = { api_url = s.env.LINODE_API_URL, api_token = s.env.LINODE_TOKEN }
    for _, l in ipairs(client.list(f, s.prefix, true)) do
      client.request(f, "DELETE", "/linode/instances/" .. l.id)
    end
  end,
})

local function acc_fields()
  return { api_url = acc.env.LINODE_API_URL, api_token = acc.env.LINODE_TOKEN, root_pass = acc.env.LINODE_ROOT_PASS,
    region = acc.env.LINODE_REGION, poll_interval = "5" }
end

describe("Linode's API #acceptance", function()
  it("a node's life: CREATE, CONFIRM and DELETE, the second run of each changing nothing", function()
    local c = loom.test.chain({ fields = acc_fields(), idempotent = true,
      config = { hostname = acc.prefix .. "web1", flavor = acc.env.LINODE_TYPE, image = acc.env.LINODE_IMAGE } })
    if c.results.CREATE and c.results.CREATE.result then acc:track("linode", c.results.CREATE.result.providerid) end
    assert.is_true(c.ok, c.failed)
    assert.same({}, c.changes)
    assert.matches("^%d+$", c.results.CREATE.result.providerid)
    assert.truthy(c.config.ipaddresses.access_v4)
    assert.is_nil(client.find(acc_fields(), acc.prefix .. "web1"))
  end)

  it("CREATE fails with Linode's reasons for a plan that does not exist", function()
    local res = loom.test.run("CREATE", { fields = acc_fields(),
      config = { hostname = acc.prefix .. "bad", flavor = "no-such-plan", image = acc.env.LINODE_IMAGE } })
    assert.equals(1, res.status)
    assert.matches("HTTP 400", res.message)
  end)
end)
