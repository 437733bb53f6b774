-- Tests for the DigitalOcean provider, run by `loomd test plugins/digitalocean`
-- (and by `make test`). The plugin runs as shipped: its real api_url and
-- its permissions.http allow-list (api.digitalocean.com). The HTTP fake
-- below claims that host, so loom.http's requests reach it on 127.0.0.1
-- instead of the network. Its handlers keep a small droplet store.

local TOKEN = "dop_v1_test_token_0123456789abcdef"

local fields = {
  api_token = TOKEN,
  ssh_keys = "loom-admin",
  poll_interval = "0.01",
  wait_for_ssh = false,
}

local api, droplets, next_id

-- new_api opens the fake DigitalOcean API: account keys, droplets by tag,
-- create (202), read (new on the first read, then active), delete (204).
local function new_api()
  droplets, next_id = {}, 3000001
  local fake = loom.test.http({ host = "api.digitalocean.com" })
  local function authorized(req)
    return req.headers.authorization == "Bearer " .. TOKEN
  end
  local function unauthorized()
    return { status = 401, json = { id = "unauthorized", message = "Unable to authenticate you" } }
  end
  fake:route("GET", "/v2/account/keys", function(req)
    if not authorized(req) then return unauthorized() end
    return { json = { ssh_keys = { { id = 7, name = "loom-admin", fingerprint = "aa:bb:cc" } }, links = {}, meta = { total = 1 } } }
  end)
  -- Listings leave GPU droplets out unless type=gpus, as DigitalOcean's do.
  fake:route("GET", "/v2/droplets", function(req)
    if not authorized(req) then return unauthorized() end
    local out = {}
    for _, d in pairs(droplets) do
      if (d.gpu == true) == (req.query.type == "gpus") then
        if req.query.name and d.name:lower() == req.query.name:lower() then
          out[#out + 1] = d
        end
        for _, t in ipairs(d.tags) do
          if t == req.query.tag_name then out[#out + 1] = d end
        end
      end
    end
    return { json = { droplets = out, links = {}, meta = { total = #out } } }
  end)
  fake:route("POST", "/v2/droplets", function(req)
    if not authorized(req) then return unauthorized() end
    local d = req.json
    d.id, d.status, d.reads = next_id, "new", 0
    d.networks = { v4 = {} }
    next_id = next_id + 1
    droplets[d.id] = d
    return { status = 202, json = { droplet = d } }
  end)
  fake:route("GET", "/v2/droplets/{id}", function(req)
    local d = droplets[tonumber(req.params.id)]
    if d == nil then return { status = 404, json = { id = "not_found", message = "The resource you were accessing could not be found." } } end
    d.reads = d.reads + 1
    if d.reads > 1 then
      d.status = "active"
      d.networks.v4 = { { type = "public", ip_address = "203.0.113.7" }, { type = "private", ip_address = "10.10.0.7" } }
    end
    return { json = { droplet = d } }
  end)
  fake:route("GET", "/v2/droplets/{id}/actions", { json = { actions = {} } })
  fake:route("DELETE", "/v2/droplets/{id}", function(req)
    local id = tonumber(req.params.id)
    if droplets[id] == nil then return { status = 404, json = { id = "not_found", message = "not found" } } end
    droplets[id] = nil
    return 204
  end)
  return fake
end

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

describe("CREATE", function()
  before_each(function() api = new_api() end)

  it("creates a droplet tagged for the node, with the account's key", function()
    local res = loom.test.run("CREATE", { fields = fields, node = "node-7", hostname = "web1.example.com" })
    assert.equals(0, res.status)
    assert.equals("3000001", res.result.providerid)
    assert.equals("root", res.result["ssh-auth"].user)
    local post = api:assert_called("POST", "/v2/droplets", 1)[1]
    assert.equals("web1.example.com", post.json.name)
    assert.equals("nyc3", post.json.region) -- the definition's default
    assert.same({ "aa:bb:cc" }, post.json.ssh_keys)
    assert.contains("coopr-node-node-7", post.json.tags)
  end)

  it("finds the node's droplet again instead of making a second one", function()
    local first = loom.test.run("CREATE", { fields = fields })
    local again = loom.test.run("CREATE", { fields = fields })
    assert.equals(first.result.providerid, again.result.providerid)
    api:assert_called("POST", "/v2/droplets", 1)
  end)

  it("finds the node's GPU droplet again, which listings by tag leave out", function()
    droplets[4000001] = { id = 4000001, name = "node1.example.com", gpu = true, status = "active",
      tags = { "loom", "coopr-node-node-1" }, networks = { v4 = {} } }
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status)
    assert.equals("4000001", res.result.providerid)
    api:assert_not_called("POST", "/v2/droplets")
  end)

  it("waits as a 429 asks, then creates the droplet once", function()
    api:fail_next({ method = "POST", path = "/v2/droplets", status = 429, headers = { ["Retry-After"] = "0" },
      json = { id = "too_many_requests", message = "API Rate limit exceeded." } })
    local res, logs = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status)
    assert.equals(1, count(droplets))
    assert.contains("retrying", table.concat(logs, "\n"))
  end)

  it("after a 500, looks for the droplet before posting again", function()
    api:fail_next({ method = "POST", path = "/v2/droplets", status = 500, headers = { ["Retry-After"] = "0" } })
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status)
    assert.equals(1, count(droplets))
    -- one tag lookup before the first POST, one after the 500 (each with
    -- its GPU lookup by name, which listings by tag leave out)
    local by_tag, gpus = 0, 0
    for _, call in ipairs(api:assert_called("GET", "/v2/droplets", 4)) do
      if call.query.tag_name == "coopr-node-node-1" then by_tag = by_tag + 1 end
      if call.query.type == "gpus" and call.query.name == "node1.example.com" then gpus = gpus + 1 end
    end
    assert.equals(2, by_tag)
    assert.equals(2, gpus)
  end)

  it("returns 201 (nothing created) for a token DigitalOcean refuses", function()
    local res = loom.test.run("CREATE", { fields = { api_token = "dop_v1_wrong", ssh_keys = "loom-admin" } })
    assert.equals(201, res.status)
    assert.matches("Unable to authenticate you", res.message)
    api:assert_not_called("POST", "/v2/droplets")
  end)

  it("names the keys the account has when ssh_keys names another", function()
    local f = { api_token = TOKEN, ssh_keys = "nobody" }
    local res = loom.test.run("CREATE", { fields = f })
    assert.equals(1, res.status)
    assert.matches('no SSH key "nobody".*loom%-admin %(aa:bb:cc%)', res.message)
  end)

  it("requires api_token and ssh_keys", function()
    local res = loom.test.run("CREATE", { fields = { region = "ams3" } })
    assert.equals(1, res.status)
    assert.matches("missing required admin fields for digitalocean: api_token, ssh_keys", res.message)
  end)

  it("keeps the token out of the result and the logs", function()
    local res, logs = loom.test.run("CREATE", { fields = { api_token = TOKEN, ssh_keys = "nobody" } })
    assert.falsy(require("loom.json").encode(res):find(TOKEN, 1, true))
    assert.falsy(table.concat(logs, "\n"):find(TOKEN, 1, true))
  end)
end)

describe("CONFIRM", function()
  before_each(function() api = new_api() end)

  it("polls until the droplet is active and reports its addresses", function()
    local c = loom.test.run("CREATE", { fields = fields })
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = c.result.providerid })
    assert.equals(0, res.status)
    assert.same({ access_v4 = "203.0.113.7", bind_v4 = "10.10.0.7" }, res.ipaddresses)
    assert.equals("node1.example.com", res.hostname)
  end)

  it("fails when the droplet is gone", function()
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = "999" })
    assert.equals(1, res.status)
    assert.matches("droplet 999 does not exist", res.message)
  end)

  it("refuses a providerid that is not a droplet id", function()
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = "../account" })
    assert.equals(1, res.status)
    assert.matches("is not a DigitalOcean droplet id", res.message)
    api:assert_not_called("*", "/v2/*")
  end)
end)

describe("a node's life", function()
  before_each(function() api = new_api() end)

  it("CREATE, CONFIRM and DELETE leave no droplet behind", function()
    local c = loom.test.chain({ fields = fields })
    assert.truthy(c.ok, c.failed)
    assert.equals(c.results.CREATE.result.providerid, c.tasks.DELETE.config.providerid)
    assert.equals("203.0.113.7", c.config.ipaddresses.access_v4)
    assert.equals(0, count(droplets))
    assert.same({}, c.leftovers)
  end)

  it("DELETE without a providerid deletes by the node tag", function()
    api:route("DELETE", "/v2/droplets", 204)
    local res = loom.test.run("DELETE", { fields = fields, node = "node-9" })
    assert.equals(0, res.status)
    local del = api:assert_called("DELETE", "/v2/droplets", 1)[1]
    assert.equals("coopr-node-node-9", del.query.tag_name)
  end)
end)
