-- Tests for the gkelike cluster driver, run by `loomd test examples/kinds/gkelike`.

local function opts(fake, name)
  return { string = { name = name or "prod", ["api-url"] = fake.url, ["api-token"] = "tok" }, int = { nodeCount = 2 } }
end

local cluster = { id = "c1", status = "RUNNING", endpoint = "https://10.0.0.1", caCert = "Q0E=", nodeCount = 2, version = "1.30" }

describe("create and post_check", function()
  it("creates the cluster and keeps its id in metadata.state", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["POST /clusters"] = { status = 201, json = { id = "c1" } },
      ["GET /clusters/{id}"] = { json = cluster },
      ["POST /clusters/{id}/serviceAccountToken"] = { json = { token = "sa-1" } },
    } })
    local res = loom.test.call("create", { options = opts(fake) })
    assert.equals(0, res.status)
    assert.equals("prod", fake:last("POST", "/clusters").json.name)
    assert.equals("Bearer tok", fake:last("POST", "/clusters").headers.authorization)
    local ci = res.result
    assert.matches('"id":"c1"', ci.metadata.state)
    local pc = loom.test.call("post_check", { cluster_info = ci })
    assert.equals("sa-1", pc.result.service_account_token)
  end)

  it("returns the partial cluster_info with the error when provisioning failed", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["POST /clusters"] = { status = 201, json = { id = "c2" } },
      ["GET /clusters/{id}"] = { json = { id = "c2", status = "ERROR", message = "no capacity" } },
    } })
    local res = loom.test.call("create", { options = opts(fake) })
    assert.equals(1, res.status)
    assert.equals("retry", res.error.class)
    assert.matches("no capacity", res.message)
    assert.matches('"id":"c2"', res.result.metadata.state)
  end)

  it("refuses a create without an API URL, as terminal", function()
    local res = loom.test.call("create", { options = { string = { name = "x" } } })
    assert.equals("terminal", res.error.class)
  end)
end)

describe("optional hooks", function()
  it("derives capabilities from the hooks defined", function()
    local caps = loom.test.call("capabilities").result
    assert.is_true(caps.get_cluster_size)
    assert.is_false(caps.set_version)
    assert.is_false(caps.etcd_backup)
  end)

  it("answers etcd_save with the contract's error", function()
    local res = loom.test.call("etcd_save", { cluster_info = {}, options = {}, snapshot_name = "s" })
    assert.equals("unimplemented", res.error.reason)
  end)
end)
