-- A skeleton automator: the Lua twin of Coopr's automator skeleton.
--
-- An automator sets software up on machines. Loom calls its hooks with
-- `self` and an `input` map:
--   bootstrap(input)  input.hostname, input.ipaddress, input.sshauth
--   install / configure / init / start / stop / remove(input)
--                     the same, plus input.fields (config.service.action.fields)
-- A real automator would SSH to input.ipaddress (require("loom.ssh"), see
-- plugins/shell). This one keeps a per-host state file in its work dir so
-- that every hook does something visible.

local loom = require("loom")
local json = require("loom.json")
local helpers = require("lib.state") -- lib/state.lua in this folder

HelloAutomator = loom.Automator:extend("HelloAutomator")

function HelloAutomator:bootstrap(input)
  log.info("bootstrapping %s (%s) as %s", tostring(input.hostname), tostring(input.ipaddress),
    tostring(input.sshauth and input.sshauth.user))
  helpers.update(input.hostname, function(st) st.bootstrapped = true end)
  self.result.status = 0
end

-- One function serves the six service hooks: each records its step.
local function service_step(step, state)
  return function(self, input)
    local service = self.task.config.service and self.task.config.service.name or "?"
    local st = helpers.update(input.hostname, function(st)
      st.services = st.services or {}
      st.services[service] = state
      st.greeting = input.fields.greeting
    end)
    log.info("%s %s on %s: now %s", step, service, tostring(input.hostname), state)
    self.result.result.hello[service].state = state
    self.result.result.hello[service].port = input.fields.service_port
    self.result.stdout = json.encode(st)
  end
end

HelloAutomator.install = service_step("install", "installed")
HelloAutomator.configure = service_step("configure", "configured")
HelloAutomator.init = service_step("init", "initialized")
HelloAutomator.start = service_step("start", "started")
HelloAutomator.stop = service_step("stop", "stopped")
HelloAutomator.remove = service_step("remove", "removed")
