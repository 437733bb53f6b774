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
