-- Tests for the fakecloud machine provider, run by `loomd test examples/kinds/fakecloud`:
-- each hook through loom.test.call, against an HTTP fake of the servers API.

local function machine(fake, uid)
  return {
    metadata = { name = "worker-1", uid = uid or "uid-1" },
    spec = { providerSpec = { value = { cloudProviderSpec = { apiUrl = fake.url, token = "t0k", serverType = "cx32" } } } },
  }
end

local server = { id = 7, name = "worker-1", status = "running", publicIp = "203.0.113.7", labels = { ["machine-uid"] = "uid-1" } }

describe("get", function()
  it("finds the instance by the machine's uid label", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /servers"] = { json = { servers = { server } } } } })
    local res = loom.test.call("get", { machine = machine(fake) })
    assert.equals(0, res.status)
    assert.equals("fakecloud://7", res.result.provider_id)
    assert.equals("ExternalIP", res.result.addresses["203.0.113.7"])
    assert.equals("machine-uid==uid-1", fake:last("GET", "/servers").query.label_selector)
  end)

  it("says not_found when no server carries the label", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /servers"] = { json = { servers = {} } } } })
    local res = loom.test.call("get", { machine = machine(fake) })
    assert.equals("not_found", res.error.class)
  end)

  it("makes a rejected token terminal", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /servers"] = 401 } })
    local res = loom.test.call("get", { machine = machine(fake) })
    assert.equals("terminal", res.error.class)
    assert.equals("InvalidConfiguration", res.error.reason)
  end)

  it("retries a 503 before giving up", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /servers"] = { json = { servers = { server } } } } })
    fake:fail_next({ status = 503, times = 2 })
    assert.equals(0, loom.test.call("get", { machine = machine(fake) }).status)
    fake:assert_called("GET", "/servers", 3)
  end)
end)

describe("create and cleanup", function()
  it("creates a labelled server with the userdata, once", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["GET /servers"] = { { json = { servers = {} } }, { json = { servers = { server } } } },
      ["POST /servers"] = { status = 201, json = { server = server } },
    } })
    local res = loom.test.call("create", { machine = machine(fake), userdata = "#cloud-config\n" })
    assert.equals(0, res.status)
    local sent = fake:last("POST", "/servers").json
    assert.equals("uid-1", sent.labels["machine-uid"])
    assert.is_true(sent.public_ip)
    assert.equals("cx32", sent.server_type)
    -- a retried create finds the server and creates nothing
    assert.equals(0, loom.test.call("create", { machine = machine(fake), userdata = "" }).status)
    fake:assert_called("POST", "/servers", 1)
  end)

  it("deletes, then reports the instance gone", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["GET /servers"] = { { json = { servers = { server } } }, { json = { servers = {} } } },
      ["DELETE /servers/{id}"] = 204,
    } })
    assert.equals(false, loom.test.call("cleanup", { machine = machine(fake) }).result)
    assert.equals(true, loom.test.call("cleanup", { machine = machine(fake) }).result)
    assert.equals("7", fake:last("DELETE").params.id)
  end)
end)

describe("admission", function()
  it("defaults the server type and rejects a spec without credentials", function()
    local spec = { providerSpec = { value = { cloudProviderSpec = {} } } }
    local res = loom.test.call("add_defaults", { spec = spec })
    assert.equals("cx22", res.result.providerSpec.value.cloudProviderSpec.serverType)
    local bad = loom.test.call("validate", { spec = spec })
    assert.equals("InvalidConfiguration", bad.error.reason)
  end)

  it("re-tags the server with the new uid on migrate_uid, once", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["GET /servers"] = { { json = { servers = { server } } }, { json = { servers = {} } } },
      ["PUT /servers/{id}"] = { json = { server = server } },
    } })
    local res = loom.test.call("migrate_uid", { machine = machine(fake), new_uid = "uid-2" })
    assert.equals(0, res.status)
    assert.equals("7", fake:last("PUT").params.id)
    assert.equals("uid-2", fake:last("PUT").json.labels["machine-uid"])
    -- run again (the controller retries): nothing carries the old uid
    assert.equals(0, loom.test.call("migrate_uid", { machine = machine(fake), new_uid = "uid-2" }).status)
    fake:assert_called("PUT", "/servers/{id}", 1)
  end)
end)

describe("metrics", function()
  it("labels the machine with its size and location, without calling the API", function()
    local m = machine({ url = "http://127.0.0.1:1" })
    m.spec.providerSpec.value.cloudProviderSpec.location = "fsn1"
    local res = loom.test.call("metrics_labels", { machine = m })
    assert.equals("cx32", res.result.size)
    assert.equals("fsn1", res.result.location)
  end)

  it("answers the absent set_metrics with success", function()
    assert.is_true(loom.test.call("set_metrics", { machines = {} }).defaulted)
  end)
end)

describe("bad machines", function()
  it("rejects an unsupported operating system with os_not_supported", function()
    local spec = { providerSpec = { value = { operatingSystem = "windows", cloudProviderSpec = { apiUrl = "http://x", token = "t" } } } }
    local res = loom.test.call("validate", { spec = spec })
    assert.equals("terminal", res.error.class)
    assert.equals("os_not_supported", res.error.reason)
  end)

  it("makes a machine without credentials or uid terminal, not retried forever", function()
    local res = loom.test.call("cleanup", { machine = { metadata = { name = "w", uid = "u" } } })
    assert.equals("InvalidConfiguration", res.error.reason)
    local fake = loom.test.http({ permit = true })
    local m = machine(fake)
    m.metadata.uid = nil
    res = loom.test.call("get", { machine = m })
    assert.equals("terminal", res.error.class)
    assert.matches("no metadata.uid", res.message)
    fake:assert_not_called("GET", "/servers")
  end)
end)
