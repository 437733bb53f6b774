-- An automator that uses every part of loom.ssh, for the SSH fake's tests.
local ssh = require("loom.ssh")
local fs = require("loom.fs")
SSHApi = require("loom").Automator:extend("SSHApi")

local function sudo(fields)
  if fields.sudo == "password" then return { password = "sudo-pw" } end
  if fields.sudo == "yes" then return true end
  return nil
end

-- INSTALL: run fields.cmd with an environment and stdin.
function SSHApi:install(input)
  local conn = ssh.from_input(input, self.task)
  local r = conn:exec(input.fields.cmd, { env = { GREETING = "hi there" }, stdin = "some input\n", sudo = sudo(input.fields),
    pty = input.fields.pty == "yes" })
  self.result.result.out = r.stdout
  self.result.result.err = r.stderr
  self.result.result.code = r.exit_code
  self.result.result.signal = r.signal
  self.result.status = r.ok and 0 or 1
  self.result.message = r.ok and nil or ("exit " .. tostring(r.exit_code))
end

-- CONFIGURE: files both ways.
function SSHApi:configure(input)
  local conn = ssh.from_input(input, self.task)
  fs.write("app.conf", "port = 80\n")
  conn:upload("app.conf", "/etc/app.conf", { mode = "0640", owner = input.fields.owner, sudo = sudo(input.fields), atomic = true })
  conn:write("/tmp/note", "hello")
  self.result.result.read = conn:read("/etc/hostname")
  conn:download("/etc/hostname", "got/hostname")
  self.result.result.downloaded = fs.read("got/hostname")
  self.result.status = 0
end

-- START: a tree, with an after command.
function SSHApi:start(input)
  local conn = ssh.from_input(input, self.task)
  fs.mkdir("site/css")
  fs.write("site/index.html", "<h1>hi</h1>")
  fs.write("site/css/a.css", "h1{}")
  local st = conn:upload_dir("site", "/srv/www", { after = "systemctl reload nginx", sudo = sudo(input.fields) })
  self.result.result.files = st.files
  self.result.result.method = st.method
  self.result.status = 0
end

-- STOP: keyscan, and a connection through a jump host.
function SSHApi:stop(input)
  local keys = ssh.keyscan({ host = "bastion.example.com" })
  self.result.result.keys = keys
  local conn = ssh.connect({ host = "10.1.0.9", user = "app", password = "pw",
    jump = { host = "bastion.example.com", user = "jump", password = "jpw" } })
  self.result.result.inner = conn:exec("hostname").stdout
  self.result.status = 0
end
