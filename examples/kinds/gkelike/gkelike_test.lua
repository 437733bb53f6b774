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

local json = require("loom.json")

-- ci is a cluster_info as Rancher stores it after create: the state
-- (cluster id, API URL and token) in metadata.state.
local function ci(fake)
  return { metadata = { state = json.encode({ id = "c1", api_url = fake.url, token = "tok" }) } }
end

describe("options", function()
  it("declares the create flags, the token as a password", function()
    local flags = loom.test.call("create_options").result
    assert.is_true(flags["api-token"].password)
    assert.equals("int", flags["node-count"].type)
    assert.equals(3, flags["node-count"].default)
    local upd = loom.test.call("update_options").result
    assert.is_nil(upd["api-token"])
    assert.equals("int", upd["node-count"].type)
  end)
end)

describe("retries", function()
  it("reuses the cluster a failed create started", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /clusters/{id}"] = { json = cluster } } })
    local res = loom.test.call("create", { options = opts(fake), cluster_info = ci(fake) })
    assert.equals(0, res.status)
    assert.equals("https://10.0.0.1", res.result.endpoint)
    fake:assert_not_called("POST", "/clusters")
  end)

  it("makes post_check wait (retry) until the cluster runs", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /clusters/{id}"] = { json = { id = "c1", status = "PROVISIONING" } } } })
    local res = loom.test.call("post_check", { cluster_info = ci(fake) })
    assert.equals("retry", res.error.class)
    assert.matches("PROVISIONING, not RUNNING", res.message)
  end)

  it("makes a 5xx a retry and a 4xx terminal", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /clusters/{id}"] = { status = 403, json = { error = "forbidden" } } } })
    assert.equals("terminal", loom.test.call("get_version", { cluster_info = ci(fake) }).error.class)
    fake:fail_next({ status = 502, times = 3 })
    assert.equals("retry", loom.test.call("get_version", { cluster_info = ci(fake) }).error.class)
  end)
end)

describe("update, size and version", function()
  it("updates the node count and version", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["PUT /clusters/{id}"] = function(req) return { json = { nodeCount = req.json.nodeCount, version = "1.31" } } end,
    } })
    local res = loom.test.call("update", { cluster_info = ci(fake), options = { int = { ["node-count"] = 5 }, string = { kubernetesVersion = "1.31" } } })
    assert.equals(5, res.result.node_count)
    assert.equals("1.31", fake:last("PUT").json.version)
  end)

  it("reads and sets the cluster size, and reads the version", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["GET /clusters/{id}"] = { json = cluster },
      ["PUT /clusters/{id}"] = { json = cluster },
    } })
    assert.equals(2, loom.test.call("get_cluster_size", { cluster_info = ci(fake) }).result.count)
    assert.equals("1.30", loom.test.call("get_version", { cluster_info = ci(fake) }).result.version)
    assert.equals(0, loom.test.call("set_cluster_size", { cluster_info = ci(fake), count = 4 }).status)
    assert.equals(4, fake:last("PUT", "/clusters/{id}").json.nodeCount)
  end)

  it("answers the absent set_version with success", function()
    local res = loom.test.call("set_version", { cluster_info = {}, version = "1.31" })
    assert.equals(0, res.status)
    assert.is_true(res.defaulted)
  end)

  it("reports its Kubernetes capabilities", function()
    local caps = loom.test.call("k8s_capabilities", { options = {} }).result
    assert.is_true(caps.node_pool_scaling_supported)
    assert.is_true(caps.l4_load_balancer.enabled)
  end)
end)

describe("remove", function()
  it("deletes the cluster, and a cluster already gone is fine", function()
    local fake = loom.test.http({ permit = true, routes = { ["DELETE /clusters/{id}"] = { { status = 204 }, { status = 404 } } } })
    assert.equals(0, loom.test.call("remove", { cluster_info = ci(fake) }).status)
    assert.equals(0, loom.test.call("remove", { cluster_info = ci(fake) }).status)
    assert.equals("c1", fake:last("DELETE").params.id)
  end)

  it("does nothing for a cluster never created", function()
    assert.equals(0, loom.test.call("remove", { cluster_info = {} }).status)
  end)

  it("answers the absent remove_legacy_service_account with success", function()
    assert.is_true(loom.test.call("remove_legacy_service_account", { cluster_info = {} }).defaulted)
  end)
end)
