local ssh = require("loom.ssh")
SSHFailing = require("loom").Automator:extend("SSHFailing")

function SSHFailing:install(input)
  ssh.from_input(input, self.task):exec(input.fields.cmd)
  self.result.status = 0
end
