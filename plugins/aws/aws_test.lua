-- Tests for the aws provider, run by `loomd test plugins/aws` (and by
-- `make test`). The plugin runs as shipped: its real endpoint
-- (https://ec2.us-east-1.amazonaws.com) and its permissions.http
-- allow-list. The HTTP fake below claims that host and answers the EC2
-- Query API's XML for the actions the plugin calls, from a small store of
-- instances. (The Go tests run the plugin against a stricter fake that
-- also checks every signature: internal/cloudfake/ec2fake.)

local crypto = require("loom.crypto")
local json = require("loom.json")

local ACCESS_KEY = "AKIDEXAMPLE"
local SECRET_KEY = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"

local fields = {
  api_user = ACCESS_KEY,
  api_password = SECRET_KEY,
  aws_region = "us-east-1",
  ssh_keypair = "coopr",
  ssh_key_resource = "coopr.pem",
  poll_interval = "5",
  host_key_wait = "60",
  wait_for_ssh = false,
}

local HOST_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIJb0W8wXq2cCz5S5WzvZ0m1Q8u3iQq7Bf8rj1T1m2f0x"

local api, instances, order, key_pairs

-- lose_next[action]: the next such request is carried out, then its
-- connection drops without an answer.
local lose_next = {}

local function url_decode(s)
  return (s:gsub("+", " "):gsub("%%(%x%x)", function(h) return string.char(tonumber(h, 16)) end))
end

local function form(body)
  local p = {}
  for pair in (body or ""):gmatch("[^&]+") do
    local k, v = pair:match("^([^=]*)=(.*)$")
    p[url_decode(k)] = url_decode(v)
  end
  return p
end

local NS = 'xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"'

local function answer(action, inner)
  return { status = 200, headers = { ["Content-Type"] = "text/xml;charset=UTF-8" },
    body = ("<%sResponse %s><requestId>req-1</requestId>%s</%sResponse>"):format(action, NS, inner, action) }
end

local function ec2_error(status, code, message)
  return { status = status, headers = { ["Content-Type"] = "text/xml;charset=UTF-8" },
    body = ("<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>req-err</RequestID></Response>")
      :format(code, message) }
end

local CODES = { pending = 0, running = 16, ["shutting-down"] = 32, terminated = 48 }

local function instance_xml(i)
  local tags = {}
  for _, t in ipairs(i.tags) do
    tags[#tags + 1] = ("<item><key>%s</key><value>%s</value></item>"):format(t[1], t[2])
  end
  local addr = ""
  if i.state == "running" then
    addr = "<ipAddress>203.0.113.7</ipAddress><dnsName>ec2-203-0-113-7.compute-1.amazonaws.com</dnsName>"
  end
  return ("<item><instanceId>%s</instanceId><imageId>%s</imageId><instanceState><code>%d</code><name>%s</name></instanceState>"
    .. "<privateIpAddress>10.0.1.7</privateIpAddress>%s<launchTime>2026-03-01T12:00:00.000Z</launchTime>"
    .. "<clientToken>%s</clientToken><tagSet>%s</tagSet></item>")
    :format(i.id, i.image, CODES[i.state], i.state, addr, i.token, table.concat(tags))
end

-- new_api opens the fake EC2: a new instance is pending on its first
-- read, then running.
local function new_api()
  instances, order, key_pairs, lose_next = {}, {}, { coopr = true }, {}
  local fake = loom.test.http({ host = "ec2.us-east-1.amazonaws.com" })
  local handlers = {}

  function handlers.DescribeImages(p)
    return answer("DescribeImages", ("<imagesSet><item><imageId>%s</imageId><rootDeviceType>ebs</rootDeviceType>"
      .. "<rootDeviceName>/dev/xvda</rootDeviceName><blockDeviceMapping><item><deviceName>/dev/xvda</deviceName>"
      .. "<ebs><volumeSize>8</volumeSize></ebs></item></blockDeviceMapping></item></imagesSet>"):format(p["ImageId.1"]))
  end

  function handlers.RunInstances(p)
    for _, id in ipairs(order) do
      if instances[id].token == p.ClientToken then
        return answer("RunInstances", "<reservationId>r-1</reservationId><instancesSet>" .. instance_xml(instances[id]) .. "</instancesSet>")
      end
    end
    if not key_pairs[p.KeyName] then
      return ec2_error(400, "InvalidKeyPair.NotFound", ("The key pair '%s' does not exist"):format(p.KeyName))
    end
    local id = ("i-%017x"):format(#order + 1)
    local i = { id = id, image = p.ImageId, state = "pending", token = p.ClientToken, tags = {}, reads = 0 }
    for n = 1, 10 do
      local k = p["TagSpecification.1.Tag." .. n .. ".Key"]
      if not k then break end
      i.tags[#i.tags + 1] = { k, p["TagSpecification.1.Tag." .. n .. ".Value"] }
    end
    instances[id] = i
    order[#order + 1] = id
    return answer("RunInstances", "<reservationId>r-1</reservationId><instancesSet>" .. instance_xml(i) .. "</instancesSet>")
  end

  function handlers.DescribeInstances(p)
    local out = {}
    if p["InstanceId.1"] then
      local i = instances[p["InstanceId.1"]]
      if not i then
        return ec2_error(400, "InvalidInstanceID.NotFound", ("The instance ID '%s' does not exist"):format(p["InstanceId.1"]))
      end
      i.reads = i.reads + 1
      if i.state == "pending" and i.reads > 2 then i.state = "running" end
      out[1] = i
    else
      for _, id in ipairs(order) do
        local i = instances[id]
        for _, t in ipairs(i.tags) do
          if "tag:" .. t[1] == p["Filter.1.Name"] and t[2] == p["Filter.1.Value.1"] and i.state ~= "terminated" then
            out[#out + 1] = i
          end
        end
      end
    end
    local items = {}
    for _, i in ipairs(out) do
      items[#items + 1] = "<item><reservationId>r-1</reservationId><instancesSet>" .. instance_xml(i) .. "</instancesSet></item>"
    end
    return answer("DescribeInstances", "<reservationSet>" .. table.concat(items) .. "</reservationSet>")
  end

  function handlers.GetConsoleOutput(p)
    local text = "cloud-init: -----BEGIN SSH HOST KEY KEYS-----\r\nssh-ed25519 " .. HOST_KEY
      .. " root@ip-10-0-1-7\r\n-----END SSH HOST KEY KEYS-----\r\n"
    return answer("GetConsoleOutput", ("<instanceId>%s</instanceId><output>%s</output>"):format(p.InstanceId, crypto.base64_encode(text)))
  end

  function handlers.TerminateInstances(p)
    local i = instances[p["InstanceId.1"]]
    if not i then
      return ec2_error(400, "InvalidInstanceID.NotFound", ("The instance ID '%s' does not exist"):format(p["InstanceId.1"]))
    end
    i.state = "terminated"
    return answer("TerminateInstances", ("<instancesSet><item><instanceId>%s</instanceId><currentState><code>32</code>"
      .. "<name>shutting-down</name></currentState></item></instancesSet>"):format(i.id))
  end

  fake:route("POST", "/", function(req)
    local p = form(req.body)
    local auth = req.headers.authorization or ""
    if not auth:find("Credential=" .. ACCESS_KEY .. "/", 1, true) or not req.headers["x-amz-date"] then
      return ec2_error(401, "AuthFailure", "AWS was not able to validate the provided access credentials")
    end
    assert.equals("2016-11-15", p.Version)
    local h = handlers[p.Action]
    assert(h, "the fake does not serve " .. tostring(p.Action))
    local resp = h(p)
    if lose_next[p.Action] then
      lose_next[p.Action] = nil
      return { drop = true }
    end
    return resp
  end)
  return fake
end

local function count_live()
  local n = 0
  for _, i in pairs(instances) do
    if i.state ~= "terminated" then n = n + 1 end
  end
  return n
end

-- calls returns the requests for an action, with their parameters.
local function calls(action)
  local out = {}
  for _, r in ipairs(api:requests("POST", "/")) do
    local p = form(r.body)
    if p.Action == action then out[#out + 1] = p end
  end
  return out
end

describe("CREATE", function()
  before_each(function() api = new_api() end)

  it("launches an instance tagged for the node, signed with SigV4", function()
    local res = loom.test.run("CREATE", { fields = fields, node = "node-7", hostname = "web1.example.com",
      config = { flavor = "m5.large", image = "ami-0abcdef1234567890" } })
    assert.equals(0, res.status, res.message)
    assert.equals(order[1], res.result.providerid)
    local run = calls("RunInstances")
    assert.equals(1, #run)
    assert.equals("m5.large", run[1].InstanceType)
    assert.equals("coopr", run[1].KeyName)
    assert.equals("default", run[1]["SecurityGroup.1"])
    assert.equals("coopr-node", run[1]["TagSpecification.1.Tag.3.Key"])
    assert.equals("node-7", run[1]["TagSpecification.1.Tag.3.Value"])
    assert.matches("^loom%-%x+$", run[1].ClientToken)
    local auth = api:last("POST", "/").headers.authorization
    assert.matches("^AWS4%-HMAC%-SHA256 Credential=AKIDEXAMPLE/%d+/us%-east%-1/ec2/aws4_request, SignedHeaders=content%-type;host;x%-amz%-date, Signature=%x+$", auth)
  end)

  it("finds the node's instance again instead of launching a second one", function()
    local first = loom.test.run("CREATE", { fields = fields })
    local again = loom.test.run("CREATE", { fields = fields })
    assert.equals(first.result.providerid, again.result.providerid)
    assert.equals(1, #calls("RunInstances"))
    assert.equals(1, count_live())
  end)

  it("sends the same ClientToken after a lost answer and gets the same instance", function()
    -- The first RunInstances launches the instance, then the connection drops.
    lose_next.RunInstances = true
    local res = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status, res.message)
    local run = calls("RunInstances")
    assert.equals(2, #run)
    assert.equals(run[1].ClientToken, run[2].ClientToken)
    assert.equals(1, #order)
    assert.equals(order[1], res.result.providerid)
  end)

  it("waits out RequestLimitExceeded on the virtual clock", function()
    api:fail_next({ method = "POST", path = "/", times = 3, status = 503,
      headers = { ["Content-Type"] = "text/xml" },
      body = "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>r</RequestID></Response>" })
    local res, logs = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status, res.message)
    assert.equals(3, #loom.test.clock.sleeps())
    assert.contains("RequestLimitExceeded", table.concat(logs, "\n"))
    assert.equals(1, count_live())
  end)

  it("returns 201 (nothing created) for credentials EC2 refuses", function()
    local f = {}
    for k, v in pairs(fields) do f[k] = v end
    f.api_user = "AKIDUNKNOWN"
    local res = loom.test.run("CREATE", { fields = f })
    assert.equals(201, res.status)
    assert.matches("AuthFailure", res.message)
    assert.equals(0, #calls("RunInstances"))
  end)

  it("keeps the secret key out of the result and the logs", function()
    local res, logs = loom.test.run("CREATE", { fields = fields })
    assert.equals(0, res.status, res.message)
    assert.falsy(json.encode(res):find(SECRET_KEY, 1, true))
    assert.falsy(table.concat(logs, "\n"):find(SECRET_KEY, 1, true))
  end)
end)

describe("CONFIRM", function()
  before_each(function() api = new_api() end)

  it("polls until the instance runs, and reads its host key from the console", function()
    local c = loom.test.run("CREATE", { fields = fields })
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = c.result.providerid })
    assert.equals(0, res.status, res.message)
    assert.same({ access_v4 = "203.0.113.7", bind_v4 = "10.0.1.7" }, res.ipaddresses)
    assert.same({ ed25519 = HOST_KEY }, res.result.ssh_host_keys)
    assert.same({ 5 }, loom.test.clock.sleeps()) -- one poll while pending
  end)

  it("fails for an instance EC2 does not know", function()
    local res = loom.test.run("CONFIRM", { fields = fields, providerid = "i-0fffffffffffffff0" })
    assert.equals(1, res.status)
    assert.matches("EC2 has no instance i%-0fffffffffffffff0", res.message)
  end)
end)

describe("a node's life", function()
  before_each(function() api = new_api() end)

  it("CREATE, CONFIRM and DELETE leave no instance behind", function()
    local c = loom.test.chain({ fields = fields })
    assert.truthy(c.ok, c.failed)
    assert.equals(c.results.CREATE.result.providerid, c.tasks.DELETE.config.providerid)
    assert.equals(0, count_live())
  end)

  it("DELETE of an instance that is gone succeeds", function()
    local res = loom.test.run("DELETE", { fields = fields, providerid = "i-0fffffffffffffff0" })
    assert.equals(0, res.status, res.message)
  end)
end)
