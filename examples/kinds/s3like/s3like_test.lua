-- Tests for the s3like bucket provisioner, run by `loomd test examples/kinds/s3like`.
-- Each file gets a fresh work dir, where the admin token is written.

local fs = require("loom.fs")

local claim = { metadata = { name = "photos", namespace = "web" } }

local function request(fake)
  return { bucket_name = "photos-1", claim = claim, parameters = { adminUrl = fake.url, port = "9000" } }
end

describe("provision", function()
  before_each(function() fs.write("admin-token", "adm\n") end)

  it("creates the bucket and a user, and returns the connection", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["PUT /buckets/{name}"] = { json = { name = "photos-1" } },
      ["POST /users"] = { json = { accessKey = "AK", secretKey = "SK" } },
      ["PUT /users/{id}/grants/{bucket}"] = 204,
    } })
    local res = loom.test.call("provision", request(fake))
    assert.equals(0, res.status)
    assert.equals("SK", res.result.access_keys.secret_access_key)
    assert.equals("photos-1", res.result.endpoint.bucket_name)
    assert.equals("obc-web-photos", res.result.additional_state.user)
    assert.equals("Bearer adm", fake:last("PUT", "/buckets/{name}").headers.authorization)
    fake:assert_not_called("PUT", "/buckets/{name}/config")
  end)

  it("applies the claim's additionalConfig to the bucket", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["PUT /buckets/{name}"] = { json = { name = "photos-1" } },
      ["PUT /buckets/{name}/config"] = 204,
      ["POST /users"] = { json = { accessKey = "AK", secretKey = "SK" } },
      ["PUT /users/{id}/grants/{bucket}"] = 204,
    } })
    local req = request(fake)
    req.claim = { metadata = claim.metadata, spec = { additionalConfig = { maxSize = "5G" } } }
    local res = loom.test.call("provision", req)
    assert.equals(0, res.status)
    assert.equals("5G", res.result.endpoint.additional_config.maxSize)
    assert.equals("5G", fake:last("PUT", "/buckets/{name}/config").json.maxSize)
  end)

  it("turns a 409 into bucket_exists", function()
    local fake = loom.test.http({ permit = true, routes = { ["PUT /buckets/{name}"] = { status = 409, json = { error = "taken" } } } })
    local res = loom.test.call("provision", request(fake))
    assert.equals("bucket_exists", res.error.reason)
  end)

  it("asks for the admin token when there is none", function()
    fs.remove("admin-token")
    local fake = loom.test.http({ permit = true })
    local res = loom.test.call("provision", request(fake))
    assert.matches("admin%-token", res.message)
  end)
end)

describe("user ids", function()
  it("derives a stable user id from the claim", function()
    local res = loom.test.call("generate_user_id", { claim = claim })
    assert.equals("obc-web-photos", res.result)
    assert.equals("obc-web-photos", loom.test.call("generate_user_id", { claim = claim }).result)
  end)
end)

describe("grant", function()
  before_each(function() fs.write("admin-token", "adm\n") end)

  it("gives the claim's user access to the StorageClass's existing bucket", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["GET /buckets/{name}"] = { json = { name = "shared" } },
      ["POST /users"] = { json = { accessKey = "AK2", secretKey = "SK2" } },
      ["PUT /users/{id}/grants/{bucket}"] = 204,
    } })
    local req = request(fake)
    req.bucket_name, req.user_id = "shared", "obc-web-viewer"
    local res = loom.test.call("grant", req)
    assert.equals(0, res.status)
    assert.equals("shared", res.result.endpoint.bucket_name)
    assert.equals("obc-web-viewer", res.result.additional_state.user)
    local put = fake:assert_called("PUT", "/users/{id}/grants/{bucket}", 1)[1]
    assert.equals("obc-web-viewer", put.params.id)
    fake:assert_not_called("PUT", "/buckets/{name}")
  end)

  it("fails, to be retried, when the bucket does not exist", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /buckets/{name}"] = 404 } })
    local res = loom.test.call("grant", request(fake))
    assert.equals("retry", res.error.class)
    assert.matches("does not exist", res.message)
  end)

  it("needs the adminUrl parameter", function()
    local req = request({ url = "" })
    req.parameters = {}
    assert.matches("adminUrl is missing", loom.test.call("grant", req).message)
  end)
end)

describe("revoke and delete", function()
  before_each(function() fs.write("admin-token", "adm\n") end)

  -- The ObjectBucket as read back from Kubernetes: no credentials.
  local function ob(fake)
    return { object_bucket = { metadata = { name = "obc-web-photos" }, spec = {
      reclaimPolicy = "Delete", endpoint = { bucketName = "photos-1" },
      additionalState = { user = "obc-web-photos", adminUrl = fake.url } } } }
  end

  it("revokes the grant, and a grant already gone is fine", function()
    local fake = loom.test.http({ permit = true, routes = { ["DELETE /users/{id}/grants/{bucket}"] = { { status = 204 }, { status = 404 } } } })
    assert.equals(0, loom.test.call("revoke", ob(fake)).status)
    assert.equals(0, loom.test.call("revoke", ob(fake)).status)
    assert.equals("photos-1", fake:last("DELETE").params.bucket)
  end)

  it("deletes the bucket and its user, again without error", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["DELETE /buckets/{name}"] = { { status = 204 }, { status = 404 } }, ["DELETE /users/{id}"] = { { status = 204 }, { status = 404 } } } })
    assert.equals(0, loom.test.call("delete", ob(fake)).status)
    assert.equals(0, loom.test.call("delete", ob(fake)).status)
    fake:assert_called("DELETE", "/buckets/{name}", 2)
  end)

  it("refuses an ObjectBucket it did not provision, with a retry that says what to fix", function()
    local res = loom.test.call("delete", { object_bucket = { metadata = { name = "obc-web-old" }, spec = {} } })
    assert.equals("retry", res.error.class) -- the library has no terminal errors
    assert.matches("ObjectBucket obc%-web%-old has no additionalState", res.message)
    assert.matches("not provisioned by s3like", res.message)
  end)

  it("applies a changed additionalConfig on update (generation 2)", function()
    local fake = loom.test.http({ permit = true, routes = { ["PUT /buckets/{name}/config"] = 204 } })
    local req = ob(fake)
    req.object_bucket.spec.endpoint.additionalConfig = { maxSize = "10G" }
    assert.equals(0, loom.test.call("update", req).status)
    assert.equals("10G", fake:last("PUT").json.maxSize)
    assert.equals("photos-1", fake:last("PUT").params.name)
  end)
end)
