-- A provider that waits the way real ones do: it polls with exponential
-- back-off until the server says the machine is up, and gives up when
-- the hook's deadline draws near.
local http = require("loom.http")
local time = require("loom.time")
Clock = require("loom").Provider:extend("Clock")

function Clock:create(input)
  local started = time.now()
  local wait = 1
  for _ = 1, tonumber(input.fields.polls) do
    local r = http.get("https://api.example.com/status", { retries = 3, retry_max_delay = 120 })
    if r:json().up then
      self.result.result.waited = time.now() - started
      self.result.status = 0
      return
    end
    if (time.remaining() or math.huge) < wait then
      error({ kind = "timeout", message = "gave up waiting with " .. time.remaining() .. "s left" })
    end
    time.sleep(wait)
    wait = wait * 2
  end
  error("never came up")
end

function Clock:confirm()
  time.sleep("2h") -- past any test's deadline
  self.result.status = 0
end

function Clock:delete()
  self.result.status = 0
end
