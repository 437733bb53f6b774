-- Every test here fails, each in its own way (TestSSHFailures).
local function run(cmd)
  return loom.test.run("INSTALL", { ipaddress = "10.0.0.7", sshauth = { user = "root", password = "pw" }, fields = { cmd = cmd } })
end

it("unexpected", function()
  loom.test.ssh({ host = "10.0.0.7" })
  run("rm -rf /")
end)

it("not ran", function()
  local host = loom.test.ssh({ host = "10.0.0.7", commands = { ["apt-get update"] = 0 } })
  run("apt-get update")
  host:assert_ran("apt-get install -y nginx")
end)

it("handler", function()
  local host = loom.test.ssh({ host = "10.0.0.7" })
  host:on("*", function(cmd)
    assert.equals("deploy", cmd.user)
  end)
  run("id")
end)
