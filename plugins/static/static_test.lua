-- Tests for the static provider, run by `loomd test plugins/static`.
-- Each file gets a fresh work dir, where the inventory is written.

local fs = require("loom.fs")
local json = require("loom.json")

local function inventory(hosts)
  fs.write("inventory.json", json.encode({ hosts = hosts }))
end

local fields = { ssh_password = "s3cret-default", confirm_wait = "0", ssh_timeout = "1" }

describe("CREATE", function()
  before_each(function()
    inventory({
      { id = "a", address = "10.0.0.1", labels = { flavor = "small", image = "debian" } },
      { id = "b", address = "10.0.0.2", port = 2222, labels = { flavor = "large", image = "debian" } },
    })
    if fs.exists("claims.json") then fs.remove("claims.json") end
  end)

  it("claims a free host whose labels match the flavor and image", function()
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status)
    assert.equals("a", res.result.providerid)
    assert.same({ user = "root", password = "s3cret-default" }, res.result["ssh-auth"])
  end)

  it("gives the same host again to a node that already holds one", function()
    local first = loom.test.run("CREATE", { fields = fields, node = "n1" })
    local again = loom.test.run("CREATE", { fields = fields, node = "n1" })
    assert.equals(first.result.providerid, again.result.providerid)
  end)

  it("reports the port of a host whose sshd is not on 22", function()
    local res = loom.test.run("CREATE", { fields = fields, config = { flavor = "large" } })
    assert.equals(0, res.status)
    assert.equals(2222, res.result["ssh-auth"].port)
  end)

  it("fails with kind capacity when every matching host is claimed", function()
    assert.equals(0, loom.test.run("CREATE", { fields = fields, node = "n1" }).status)
    local res = loom.test.run("CREATE", { fields = fields, node = "n2" })
    assert.equals(1, res.status)
    assert.equals("capacity", res.error.kind)
    assert.matches("claimed %(by nodes n1%)", res.message)
  end)

  it("fails with kind config when a host has no credentials", function()
    local res = loom.test.run("CREATE", { fields = { confirm_wait = "0" } })
    assert.equals(1, res.status)
    assert.equals("config", res.error.kind)
    assert.matches("has no password, key or key_file", res.message)
  end)

  it("never shows the default password in a message", function()
    inventory({})
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(1, res.status)
    assert.falsy(res.message:find("s3cret-default", 1, true))
  end)
end)

describe("the inventory", function()
  it("must exist", function()
    if fs.exists("inventory.json") then fs.remove("inventory.json") end
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals("config", res.error.kind)
    assert.matches("cannot read the inventory inventory.json", res.message)
  end)

  it("must give each host an address", function()
    inventory({ { id = "x" } })
    local res = loom.test.run("CREATE", { fields = fields })
    assert.matches('host #1: "address" is required', res.message)
  end)

  it("must not use an id twice", function()
    inventory({ { id = "x", address = "10.0.0.1" }, { id = "x", address = "10.0.0.2" } })
    local res = loom.test.run("CREATE", { fields = fields })
    assert.matches('id "x" is used twice', res.message)
  end)
end)

describe("DELETE", function()
  before_each(function()
    inventory({ { id = "a", address = "10.0.0.1", labels = { flavor = "small", image = "debian" } } })
    if fs.exists("claims.json") then fs.remove("claims.json") end
  end)

  it("releases the host so another node can claim it", function()
    local c = loom.test.run("CREATE", { fields = fields, node = "n1" })
    local d = loom.test.run("DELETE", { fields = fields, node = "n1", providerid = c.result.providerid })
    assert.equals(0, d.status)
    local again = loom.test.run("CREATE", { fields = fields, node = "n2" })
    assert.equals("a", again.result.providerid)
  end)

  it("leaves a host that now belongs to another node claimed", function()
    loom.test.run("CREATE", { fields = fields, node = "n1" })
    local d, logs = loom.test.run("DELETE", { fields = fields, node = "n2", providerid = "a" })
    assert.equals(0, d.status)
    assert.contains("belongs to node n1", table.concat(logs, "\n"))
    assert.equals(1, loom.test.run("CREATE", { fields = fields, node = "n3" }).status)
  end)

  it("succeeds with nothing to do when CREATE claimed nothing", function()
    assert.equals(0, loom.test.run("DELETE", { fields = fields }).status)
    assert.equals(0, loom.test.run("DELETE", { fields = fields, node = "n9" }).status)
  end)

  it("releases the node's claim when no providerid came back", function()
    loom.test.run("CREATE", { fields = fields, node = "n1" })
    local d, logs = loom.test.run("DELETE", { fields = fields, node = "n1" })
    assert.equals(0, d.status)
    assert.contains("holds host a (its claim): releasing it", table.concat(logs, "\n"))
    assert.equals("a", loom.test.run("CREATE", { fields = fields, node = "n2" }).result.providerid)
    fs.remove("claims.json")
  end)
end)

describe("a whole node", function()
  it("carries CREATE's result into CONFIRM and DELETE, and fails CONFIRM when sshd does not answer", function()
    -- No SSH fake serves 127.0.0.1:1, so CONFIRM's keyscan fails at once.
    inventory({ { id = "a", address = "127.0.0.1", port = 1, labels = { flavor = "small", image = "debian" } } })
    local c = loom.test.chain({ fields = fields, stop_on_failure = false })
    assert.same({ "CREATE", "CONFIRM", "DELETE" }, c.order)
    assert.equals("a", c.tasks.CONFIRM.config.providerid)
    assert.equals("CONFIRM", c.failed)
    assert.equals("connect", c.results.CONFIRM.error.kind)
    assert.equals(0, c.results.DELETE.status)
  end)
end)

describe("CONFIRM", function()
  local function claimed(host)
    inventory({ host })
    local made = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, made.status, made.message)
    return made.result.providerid
  end

  it("records the host keys the host's sshd presents, for the automators to pin", function()
    local node = loom.test.ssh({ host = "10.0.0.1" })
    local id = claimed({ id = "a", address = "10.0.0.1", labels = { flavor = "small", image = "debian" } })
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = id })
    assert.equals(0, res.status, res.message)
    assert.equals(node.host_key, res.result.ssh_host_keys.ed25519)
    assert.equals("10.0.0.1", res.ipaddresses.access_v4)
  end)

  it("refuses a host whose key is not the one the inventory pins", function()
    loom.test.ssh({ host = "10.0.0.1" })
    local other = loom.test.ssh({ host = "10.0.0.99" }).host_key
    local id = claimed({ id = "a", address = "10.0.0.1", labels = { flavor = "small", image = "debian" },
      host_keys = { ed25519 = other } })
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = id })
    assert.equals(1, res.status)
    assert.equals("host_key", res.error.kind)
  end)

  it("waits for a booting host up to confirm_wait, once a second", function()
    local id = claimed({ id = "a", address = "10.0.0.1", labels = { flavor = "small", image = "debian" } })
    local wait = { ssh_password = fields.ssh_password, confirm_wait = "10", ssh_timeout = "1" }
    local res = loom.test.run("CONFIRM", { fields = wait, providerid = id })
    assert.equals(1, res.status)
    assert.matches("did not answer within 10s", res.message)
    -- 9 one-second waits on the virtual clock: the test takes milliseconds.
    assert.equals(9, #loom.test.clock.sleeps())
  end)
end)
