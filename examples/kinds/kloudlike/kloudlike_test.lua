-- Tests for the kloudlike Kloud provider, run by `loomd test examples/kinds/kloudlike`.

local json = require("loom.json")

local function cred(fake, bootstrap)
  return { identifier = "c1", credential = { api_url = fake and fake.url or "http://127.0.0.1:1", token = "kt" }, bootstrap = bootstrap }
end

describe("stack", function()
  it("puts the network and a default size in every instance, and the token only in the provider block", function()
    local tpl = json.encode({ resource = { kloudlike_instance = { web = { size = "large" }, db = { user_data = "echo db" } } },
      variable = { kloudlike_token = { default = "kt" } } })
    local res = loom.test.call("apply_template", { credential = cred(nil, { network_id = "net-1" }), template = { content = tpl }, group = "g", stack_id = "s" })
    assert.equals(0, res.status)
    assert.is_nil(res.result.key) -- kloud's default: <group>-<stack id>
    local out = json.decode(res.result.content)
    assert.equals("net-1", out.resource.kloudlike_instance.db.network_id)
    assert.equals("small", out.resource.kloudlike_instance.db.size)
    assert.equals("large", out.resource.kloudlike_instance.web.size)
    -- the user's script is left for the host to wrap in Klient's cloud-init
    assert.equals("echo db", out.resource.kloudlike_instance.db.user_data)
    assert.equals("${var.kloudlike_token}", out.provider.kloudlike.token)
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

describe("schema and validators", function()
  it("describes the credential with the token secret", function()
    local sc = loom.test.call("schema").result
    assert.equals("token", sc.credential[2].name)
    assert.is_true(sc.credential[2].secret)
    assert.equals("network_id", sc.bootstrap[1].name)
  end)

  it("checks a credential and the bootstrap outputs", function()
    assert.equals(0, loom.test.call("valid_credential", { value = { api_url = "http://x", token = "t" } }).status)
    assert.matches("api_url and token are required", loom.test.call("valid_credential", { value = { api_url = "http://x" } }).message)
    assert.matches("no network_id", loom.test.call("valid_bootstrap", { value = {} }).message)
    assert.equals(0, loom.test.call("valid_bootstrap", { value = { network_id = "n" } }).status)
  end)

  it("checks the machine id in the metadata", function()
    assert.equals(0, loom.test.call("valid_metadata", { value = { id = "m-3" } }).status)
    assert.equals(0, loom.test.call("valid_metadata", { value = {} }).status)
    assert.matches("not a kloudlike id", loom.test.call("valid_metadata", { value = { id = "i-3" } }).message)
  end)
end)

describe("credential", function()
  it("verifies the token against the API", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /whoami"] = { json = { user = "alice" } } } })
    assert.equals(0, loom.test.call("verify_credential", { credential = cred(fake) }).status)
    assert.equals("Bearer kt", fake:last("GET", "/whoami").headers.authorization)
  end)

  it("gives a rejected token Kloud's code 414", function()
    local fake = loom.test.http({ permit = true, routes = { ["GET /whoami"] = 401 } })
    local res = loom.test.call("verify_credential", { credential = cred(fake) })
    assert.equals(414, res.error.code)
    assert.matches("401", res.message)
  end)

  it("bootstraps a network whose id is the template's output", function()
    local tpls = loom.test.call("bootstrap_templates", { credential = cred() }).result
    assert.equals(1, #tpls)
    local tf = json.decode(tpls[1].content)
    assert.is_not_nil(tf.output.network_id)
  end)

  it("refuses to apply a stack before the bootstrap, as terminal", function()
    local res = loom.test.call("apply_template", { credential = cred(), template = { content = "{}" } })
    assert.equals("terminal", res.error.class)
    assert.matches("not bootstrapped", res.message)
  end)
end)

describe("start and stop", function()
  it("starts and stops the machine and patches its ip", function()
    local fake = loom.test.http({ permit = true, routes = {
      ["POST /machines/{id}/start"] = { json = { state = "running", ip = "10.0.0.2" } },
      ["POST /machines/{id}/stop"] = { json = { state = "stopped", ip = "10.0.0.2" } },
    } })
    local m = { credential = cred(fake), metadata = { id = "m1" } }
    assert.equals("10.0.0.2", loom.test.call("start", m).result.ip)
    assert.equals(0, loom.test.call("stop", m).status)
    assert.equals("m1", fake:last("POST").params.id)
  end)

  it("reports a machine without an id as terminal, and a missing one as not_found", function()
    local fake = loom.test.http({ permit = true, routes = { ["POST /machines/{id}/start"] = 404 } })
    assert.equals("terminal", loom.test.call("start", { credential = cred(fake) }).error.class)
    assert.equals("not_found", loom.test.call("start", { credential = cred(fake), metadata = { id = "m9" } }).error.class)
  end)

  it("says NotInitialized for a machine never built", function()
    assert.equals("NotInitialized", loom.test.call("info", { credential = cred() }).result.state)
  end)
end)
