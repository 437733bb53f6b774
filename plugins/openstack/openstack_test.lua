-- Tests for the OpenStack provider, run by `loomd test plugins/openstack`
-- (and by `make test`). The HTTP fake below claims the hosts of a small
-- cloud (Keystone, Nova, Neutron, Glance) so loom.http's requests reach it
-- on 127.0.0.1 instead of the network; its handlers keep the cloud's state
-- in Lua tables. The Go tests (openstack_test.go) run the same plugin
-- against a stricter Go fake whose answers and the plugin's requests are
-- checked against gophercloud.

local json = require("loom.json")

-- The plugin declares two provider types (openstack, rackspace): these
-- tests run the openstack type unless they say otherwise.
local function run(hook, opts)
  opts.type = opts.type or "openstack"
  return loom.test.run(hook, opts)
end

local PASSWORD = "s3cret-Passw0rd-for-tests"
local TOKEN = "gAAAAABtest-token-0123456789abcdef"
local ADMIN_PASS = "nova-generated-Pa55"

local fields = {
  openstack_auth_url = "https://keystone.example.com:5000/v3",
  api_user = "loom",
  api_password = PASSWORD,
  openstack_tenant = "ops",
  ssh_keypair = "loom-key",
  ssh_key_resource = "loom.pem",
  network_ids = "1cb4bbe4-6a3d-4f4b-9f53-3f0c7c5c1a11",
  poll_interval = "2",
  wait_for_ssh = false,
}

local cloud, servers, fips, next_id

local function count(t)
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n
end

local function uuid(n)
  return ("00000000-0000-4000-8000-%012d"):format(n)
end

-- new_cloud opens the fake cloud. Servers are BUILD on their first read
-- and ACTIVE after it.
local function new_cloud()
  servers, fips, next_id = {}, {}, 1
  local fake = loom.test.http({ hosts = { "keystone.example.com", "nova.example.com", "neutron.example.com",
    "glance.example.com" } })
  local function authorized(req)
    return req.headers["x-auth-token"] == TOKEN
  end
  local unauthorized = { status = 401, json = { error = { code = 401, title = "Unauthorized",
    message = "The request you have made requires authentication." } } }

  fake:route("POST", "/v3/auth/tokens", function(req)
    local id = req.json.auth.identity
    local user = id.methods[1] == "password" and id.password.user.name
    local ok = (user == "loom" or user == "coopr-v2") and id.password.user.password == PASSWORD
      or id.methods[1] == "application_credential" and id.application_credential.id == "app-1"
        and id.application_credential.secret == PASSWORD
    if not ok then return unauthorized end
    return { status = 201, headers = { ["X-Subject-Token"] = TOKEN }, json = { token = {
      expires_at = "2099-01-01T00:00:00.000000Z",
      methods = id.methods,
      project = { id = "p-1", name = "ops", domain = { id = "default", name = "Default" } },
      catalog = {
        { type = "compute", name = "nova", endpoints = {
          { interface = "public", region = "RegionOne", region_id = "RegionOne", url = "https://nova.example.com:8774/v2.1" } } },
        { type = "network", name = "neutron", endpoints = {
          { interface = "public", region = "RegionOne", region_id = "RegionOne", url = "https://neutron.example.com:9696" } } },
        { type = "image", name = "glance", endpoints = {
          { interface = "public", region = "RegionOne", region_id = "RegionOne", url = "https://glance.example.com:9292" } } },
      },
    } } }
  end)

  fake:route("GET", "/v2.1/flavors/{id}", function(req)
    if not authorized(req) then return unauthorized end
    if req.params.id ~= "2" then return { status = 404, json = { itemNotFound = { code = 404, message = "Flavor could not be found." } } } end
    return { json = { flavor = { id = "2", name = "m1.small" } } }
  end)
  fake:route("GET", "/v2.1/flavors", { json = { flavors = { { id = "2", name = "m1.small" }, { id = "3", name = "m1.medium" } } } })
  fake:route("GET", "/v2/images", function(req)
    if req.query.name == "debian-12" then
      return { json = { images = { { id = "6e4b3a4e-0b5e-4c58-9e2b-6d5a1c0f9a10", name = "debian-12", status = "active" } } } }
    end
    return { json = { images = {} } }
  end)

  local function server_json(s)
    return { id = s.id, name = s.name, status = s.status, metadata = s.metadata, created = s.created,
      addresses = s.status == "ACTIVE" and s.addresses or {}, accessIPv4 = "", accessIPv6 = "" }
  end
  fake:route("POST", "/v2.1/servers", function(req)
    if not authorized(req) then return unauthorized end
    local b = req.json.server
    local s = { id = uuid(next_id), name = b.name, status = "BUILD", metadata = b.metadata or {}, reads = 0,
      created = ("2024-01-01T00:00:%02dZ"):format(next_id), body = b,
      addresses = { private = { { addr = "10.0.0." .. (10 + next_id), version = 4, ["OS-EXT-IPS:type"] = "fixed" } } } }
    next_id = next_id + 1
    servers[s.id] = s
    return { status = 202, json = { server = { id = s.id, adminPass = ADMIN_PASS, links = {} } } }
  end)
  fake:route("GET", "/v2.1/servers/{id}", function(req)
    if not authorized(req) then return unauthorized end
    local s = servers[req.params.id]
    if s == nil then return { status = 404, json = { itemNotFound = { code = 404, message = "Instance could not be found." } } } end
    s.reads = s.reads + 1
    if s.reads > 1 and s.status == "BUILD" then s.status = "ACTIVE" end
    return { json = { server = server_json(s) } }
  end)
  fake:route("DELETE", "/v2.1/servers/{id}", function(req)
    if not authorized(req) then return unauthorized end
    if servers[req.params.id] == nil then return { status = 404, json = { itemNotFound = { code = 404, message = "Instance could not be found." } } } end
    servers[req.params.id] = nil
    return 204
  end)

  -- Declared after /servers/{id}: later routes win.
  fake:route("GET", "/v2.1/servers/detail", function(req)
    if not authorized(req) then return unauthorized end
    local out = {}
    for _, s in pairs(servers) do
      -- Nova's name filter is a regular expression; the plugin anchors and
      -- quotes the name, which this reads back.
      local want = req.query.name and req.query.name:gsub("^%^", ""):gsub("%$$", ""):gsub("\\(.)", "%1")
      if want == nil or s.name == want then out[#out + 1] = server_json(s) end
    end
    return { json = { servers = out } }
  end)
  fake:route("GET", "/v2.0/ports", function(req)
    local s = servers[req.query.device_id]
    if not s then return { json = { ports = {} } } end
    return { json = { ports = { { id = "port-" .. s.id, device_id = s.id,
      fixed_ips = { { ip_address = s.addresses.private[1].addr, subnet_id = "sub-1" } } } } } }
  end)
  fake:route("GET", "/v2.0/networks", { json = { networks = { { id = "ext-net", name = "public", ["router:external"] = true } } } })
  fake:route("GET", "/v2.0/floatingips", function(req)
    local out = {}
    for _, f in pairs(fips) do
      if (req.query.port_id == nil or f.port_id == req.query.port_id)
          and (req.query.description == nil or f.description == req.query.description) then
        out[#out + 1] = f
      end
    end
    return { json = { floatingips = out } }
  end)
  fake:route("POST", "/v2.0/floatingips", function(req)
    local b = req.json.floatingip
    local f = { id = "fip-" .. (count(fips) + 1), floating_ip_address = "203.0.113." .. (50 + count(fips)),
      floating_network_id = b.floating_network_id, port_id = b.port_id, fixed_ip_address = b.fixed_ip_address,
      description = b.description, status = "ACTIVE" }
    fips[f.id] = f
    -- Neutron shows the address on the server once associated.
    for _, s in pairs(servers) do
      if "port-" .. s.id == b.port_id then
        table.insert(s.addresses.private, { addr = f.floating_ip_address, version = 4, ["OS-EXT-IPS:type"] = "floating" })
      end
    end
    return { status = 201, json = { floatingip = f } }
  end)
  fake:route("DELETE", "/v2.0/floatingips/{id}", function(req)
    if fips[req.params.id] == nil then return 404 end
    fips[req.params.id] = nil
    return 204
  end)
  return fake
end

local function only(t)
  for _, v in pairs(t) do return v end
end

describe("CREATE", function()
  before_each(function() cloud = new_cloud() end)

  it("creates a server carrying the node's metadata, with the key pair and networks", function()
    local res = run("CREATE", { fields = fields, node = "node-7", hostname = "web1.example.com",
      config = { flavor = "2", image = "6e4b3a4e-0b5e-4c58-9e2b-6d5a1c0f9a10", clusterId = "c-42" } })
    assert.equals(0, res.status, res.message)
    local s = only(servers)
    assert.equals(s.id, res.result.providerid)
    assert.equals("web1.example.com", s.body.name)
    assert.equals("2", s.body.flavorRef)
    assert.equals("node-7", s.body.metadata.loom_node)
    assert.equals("loom-key", s.body.key_name)
    assert.same({ { name = "default" } }, s.body.security_groups)
    assert.same({ { uuid = "1cb4bbe4-6a3d-4f4b-9f53-3f0c7c5c1a11" } }, s.body.networks)
    assert.equals("root", res.result["ssh-auth"].user)
    assert.matches("/ssh_keys/loom%.pem$", res.result["ssh-auth"].identityfile)
    -- Nova's generated root password is handed on to the automators.
    assert.equals(ADMIN_PASS, res.result["ssh-auth"].password)
  end)

  it("resolves a flavor name and an image name", function()
    local res = run("CREATE", { fields = fields, config = { flavor = "m1.medium", image = "debian-12" } })
    assert.equals(0, res.status, res.message)
    local s = only(servers)
    assert.equals("3", s.body.flavorRef)
    assert.equals("6e4b3a4e-0b5e-4c58-9e2b-6d5a1c0f9a10", s.body.imageRef)
  end)

  it("names the flavors the cloud has when config.flavor names none", function()
    local res = run("CREATE", { fields = fields, config = { flavor = "huge", image = "debian-12" } })
    assert.equals(1, res.status)
    assert.matches('no flavor "huge".*m1%.small %(2%)', res.message)
    cloud:assert_not_called("POST", "/v2.1/servers")
  end)

  it("finds the node's server again instead of making a second one", function()
    local cfg = { flavor = "2", image = "debian-12" }
    local first = run("CREATE", { fields = fields, config = cfg })
    local again = run("CREATE", { fields = fields, config = cfg })
    assert.equals(0, again.status, again.message)
    assert.equals(first.result.providerid, again.result.providerid)
    cloud:assert_called("POST", "/v2.1/servers", 1)
  end)

  it("after an answer lost on the way back, finds the server Nova made", function()
    -- Nova makes the server, then the connection drops before the 202.
    local made = false
    cloud:route("POST", "/v2.1/servers", function(req)
      local b = req.json.server
      local s = { id = uuid(900), name = b.name, status = "BUILD", metadata = b.metadata, reads = 0, created = "2024-01-01T00:00:00Z",
        body = b, addresses = { private = { { addr = "10.0.0.9", version = 4 } } } }
      servers[s.id] = s
      made = true
      return { drop = true }
    end)
    local res = run("CREATE", { fields = fields, config = { flavor = "2", image = "debian-12" } })
    assert.equals(0, res.status, res.message)
    assert.truthy(made)
    assert.equals(uuid(900), res.result.providerid)
    assert.equals(1, count(servers))
    cloud:assert_called("POST", "/v2.1/servers", 1)
  end)

  it("after a 500 that made nothing, looks for the server, then posts again", function()
    cloud:fail_next({ method = "POST", path = "/v2.1/servers", status = 500,
      json = { computeFault = { code = 500, message = "Unexpected API Error." } } })
    local res = run("CREATE", { fields = fields, config = { flavor = "2", image = "debian-12" } })
    assert.equals(0, res.status, res.message)
    assert.equals(1, count(servers))
    cloud:assert_called("POST", "/v2.1/servers", 2)
    -- one lookup before the first POST, one after the 500
    cloud:assert_called("GET", "/v2.1/servers/detail", 2)
    assert.same({ 2 }, loom.test.clock.sleeps())
  end)

  it("waits out Nova's throttling on the virtual clock, then creates the server once", function()
    cloud:fail_next({ method = "POST", path = "/v2.1/servers", status = 429, times = 2, headers = { ["Retry-After"] = "8" },
      json = { overLimit = { code = 429, message = "Over limit", retryAfter = "8" } } })
    local res, logs = run("CREATE", { fields = fields, config = { flavor = "2", image = "debian-12" } })
    assert.equals(0, res.status, res.message)
    assert.equals(1, count(servers))
    assert.same({ 8, 8 }, loom.test.clock.sleeps())
    assert.contains("throttled", table.concat(logs, "\n"))
  end)

  it("reads Nova's 413 overLimit with retryAfter in the body as a throttle", function()
    cloud:fail_next({ method = "GET", path = "/v2.1/servers/detail", status = 413,
      json = { overLimit = { code = 413, message = "This request was rate-limited.", retryAfter = "3" } } })
    local res = run("CREATE", { fields = fields, config = { flavor = "2", image = "debian-12" } })
    assert.equals(0, res.status, res.message)
    assert.same({ 3 }, loom.test.clock.sleeps())
  end)

  it("fails clearly when the cloud asks to wait past the hook deadline", function()
    cloud:fail_next({ method = "POST", path = "/v2.1/servers", status = 429, headers = { ["Retry-After"] = "3600" } })
    local res = run("CREATE", { fields = fields, config = { flavor = "2", image = "debian-12" } })
    assert.equals(1, res.status)
    assert.matches("asks to wait 3600s, past the hook deadline", res.message)
    assert.equals(0, count(servers))
  end)

  it("returns 201 (nothing created) when Keystone refuses the password", function()
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.api_password = "wrong-password"
    local res = run("CREATE", { fields = f, config = { flavor = "2", image = "debian-12" } })
    assert.equals(201, res.status)
    assert.matches("HTTP 401", res.message)
    assert.matches("api_user/api_password", res.message)
    cloud:assert_not_called("POST", "/v2.1/servers")
  end)

  it("authenticates with an application credential", function()
    local f = { openstack_auth_url = fields.openstack_auth_url, application_credential_id = "app-1",
      application_credential_secret = PASSWORD, wait_for_ssh = false }
    local res = run("CREATE", { fields = f, config = { flavor = "2", image = "debian-12" } })
    assert.equals(0, res.status, res.message)
    local auth = cloud:last("POST", "/v3/auth/tokens")
    assert.same({ "application_credential" }, auth.json.auth.identity.methods)
    assert.is_nil(auth.json.auth.scope)
  end)

  it("reads Coopr's Keystone v2 URL as the same endpoint's v3", function()
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.openstack_auth_url = "https://keystone.example.com:5000/v2.0/tokens"
    -- Another account than the other tests': the plugin keeps tokens per
    -- VM (as loomd serve's pooled VMs do), and the tests share one VM.
    f.api_user = "coopr-v2"
    local res = run("CREATE", { fields = f, config = { flavor = "2", image = "debian-12" } })
    assert.equals(0, res.status, res.message)
    cloud:assert_called("POST", "/v3/auth/tokens")
  end)

  it("requires Keystone credentials", function()
    local res = run("CREATE", { fields = { openstack_auth_url = "https://keystone.example.com:5000/v3" },
      config = { flavor = "2", image = "debian-12" } })
    assert.equals(1, res.status)
    assert.matches("missing required admin fields for openstack", res.message)
  end)

  it("keeps the password and the token out of the result and the logs", function()
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.api_password = "wrong-" .. PASSWORD
    local bad, bad_logs = run("CREATE", { fields = f, config = { flavor = "2", image = "debian-12" } })
    local good, good_logs = run("CREATE", { fields = fields, config = { flavor = "2", image = "debian-12" } })
    local c = loom.test.chain({ type = "openstack", fields = fields, config = { flavor = "2", image = "debian-12" } })
    for _, out in ipairs({ json.encode(bad), table.concat(bad_logs, "\n"), json.encode(good), table.concat(good_logs, "\n"),
      json.encode(c.results) }) do
      assert.falsy(out:find(PASSWORD, 1, true), "the password leaked")
      assert.falsy(out:find(TOKEN, 1, true), "the token leaked")
    end
  end)
end)

describe("CONFIRM", function()
  before_each(function() cloud = new_cloud() end)

  it("polls until the server is ACTIVE and reports its addresses", function()
    local c = run("CREATE", { fields = fields, config = { flavor = "2", image = "debian-12" } })
    local res = run("CONFIRM", { fields = fields, providerid = c.result.providerid })
    assert.equals(0, res.status, res.message)
    assert.same({ access_v4 = "10.0.0.11", bind_v4 = "10.0.0.11" }, res.ipaddresses)
    assert.same({ 2 }, loom.test.clock.sleeps())
  end)

  it("attaches a floating IP when asked, once", function()
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.floating_ip = "true"
    local c = run("CREATE", { fields = f, node = "node-3", config = { flavor = "2", image = "debian-12" } })
    local res = run("CONFIRM", { fields = f, node = "node-3", providerid = c.result.providerid })
    assert.equals(0, res.status, res.message)
    assert.same({ access_v4 = "203.0.113.50", bind_v4 = "10.0.0.11" }, res.ipaddresses)
    local post = cloud:assert_called("POST", "/v2.0/floatingips", 1)[1]
    assert.equals("ext-net", post.json.floatingip.floating_network_id)
    assert.equals("loom node node-3", post.json.floatingip.description)
    -- A CONFIRM run again keeps the same address.
    local again = run("CONFIRM", { fields = f, node = "node-3", providerid = c.result.providerid })
    assert.equals("203.0.113.50", again.ipaddresses.access_v4)
    cloud:assert_called("POST", "/v2.0/floatingips", 1)
  end)

  it("fails when the server is gone", function()
    local res = run("CONFIRM", { fields = fields, providerid = uuid(404) })
    assert.equals(1, res.status)
    assert.matches("does not exist", res.message)
  end)

  it("fails with Nova's fault when the server is in ERROR", function()
    local c = run("CREATE", { fields = fields, config = { flavor = "2", image = "debian-12" } })
    local s = servers[c.result.providerid]
    s.status = "ERROR"
    cloud:route("GET", "/v2.1/servers/{id}", { json = { server = { id = s.id, name = s.name, status = "ERROR",
      fault = { code = 500, message = "No valid host was found." }, addresses = {}, metadata = s.metadata } } })
    local res = run("CONFIRM", { fields = fields, providerid = s.id })
    assert.equals(1, res.status)
    assert.matches("No valid host was found", res.message)
  end)

  it("refuses a providerid that is not a server id", function()
    local res = run("CONFIRM", { fields = fields, providerid = "../os-keypairs" })
    assert.equals(1, res.status)
    assert.matches("is not an OpenStack server id", res.message)
    cloud:assert_not_called("*", "/v2.1/*")
  end)
end)

describe("a node's life", function()
  before_each(function() cloud = new_cloud() end)

  it("CREATE, CONFIRM and DELETE leave no server and no floating IP behind", function()
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.floating_ip = true
    local c = loom.test.chain({ type = "openstack", fields = f, config = { flavor = "2", image = "debian-12" } })
    assert.truthy(c.ok, c.failed)
    assert.equals(c.results.CREATE.result.providerid, c.tasks.DELETE.config.providerid)
    assert.equals("203.0.113.50", c.config.ipaddresses.access_v4)
    assert.equals(0, count(servers))
    assert.equals(0, count(fips))
    assert.same({}, c.leftovers)
  end)

  it("DELETE of a server already gone succeeds", function()
    local res = run("DELETE", { fields = fields, providerid = uuid(77) })
    assert.equals(0, res.status, res.message)
  end)

  it("DELETE without a providerid finds the node's server by its metadata", function()
    run("CREATE", { fields = fields, node = "node-9", hostname = "db1.example.com",
      config = { flavor = "2", image = "debian-12" } })
    -- another node's server with the same name is not touched
    servers[uuid(500)] = { id = uuid(500), name = "db1.example.com", status = "ACTIVE", metadata = { loom_node = "other" },
      reads = 0, created = "2024-01-01T00:00:00Z", addresses = {} }
    local res = run("DELETE", { fields = fields, node = "node-9", hostname = "db1.example.com" })
    assert.equals(0, res.status, res.message)
    assert.equals(1, count(servers))
    assert.truthy(servers[uuid(500)])
  end)
end)

describe("Rackspace's identity URL", function()
  local client = require("lib.openstack.client")

  it("defaults by region (London apart) and reads a given URL as its v2.0 root", function()
    assert.equals("https://lon.identity.api.rackspacecloud.com/v2.0", client.rackspace_url("", "lon"))
    assert.equals("https://identity.api.rackspacecloud.com/v2.0", client.rackspace_url(nil, "DFW"))
    assert.equals("https://id.example.com/v2.0", client.rackspace_url("https://id.example.com/v2.0/tokens/", "dfw"))
    assert.equals("https://id.example.com/v2.0", client.rackspace_url("https://id.example.com", "dfw"))
  end)

  it("refuses another identity version and a URL that is not http(s)", function()
    local ok, err = pcall(client.rackspace_url, "https://id.example.com/v3", "dfw")
    assert.falsy(ok)
    assert.matches("other than v2%.0", err.message)
    ok, err = pcall(client.rackspace_url, "id.example.com", "dfw")
    assert.falsy(ok)
    assert.matches("not an http%(s%) URL", err.message)
  end)
end)
