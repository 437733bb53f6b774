-- Tests for the kloudlike Kloud provider, run by `loomd test examples/kinds/kloudlike`.

local json = require("loom.json")

local function cred(fake, bootstrap)
  return { identifier = "c1", credential = { api_url = fake and fake.url or "http://127.0.0.1:1", token = "kt" }, bootstrap = bootstrap }
end

describe("stack", function()
  it("injects the network and the agent into every instance, without the token", function()
    local tpl = json.encode({ resource = { kloudlike_instance = { web = {}, db = {} } } })
    local res = loom.test.call("apply_template", { credential = cred(nil, { network_id = "net-1" }), template = { content = tpl }, group = "g", stack_id = "s" })
    assert.equals(0, res.status)
    assert.equals("g-s", res.result.key)
    local out = json.decode(res.result.content)
    assert.equals("net-1", out.resource.kloudlike_instance.db.network_id)
    assert.matches("install%-klient", out.resource.kloudlike_instance.web.user_data)
    assert.is_nil(res.result.content:find("kt", 1, true))
  end)
end)

describe("machine", function()
  it("maps the API's state and reports a missing machine as not_found", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["GET /machines/m1"] = { json = { state = "running", ip = "10.0.0.2" } },
      ["GET /machines/m2"] = 404,
    } })
    local res = loom.test.call("info", { credential = cred(fake), metadata = { id = "m1" } })
    assert.equals("Running", res.result.state)
    local gone = loom.test.call("info", { credential = cred(fake), metadata = { id = "m2" } })
    assert.equals("not_found", gone.error.class)
    assert.equals(106, gone.error.code)
  end)
end)
