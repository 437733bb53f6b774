local loom = require("loom")
local http = require("loom.http")
local time = require("loom.time")

Deadline = loom.Provider:extend("Deadline")

function Deadline:create(input)
  self.result.result.remaining = time.remaining()
  -- Two 429s with Retry-After: 20 are waited out on the virtual clock.
  local resp = http.get("https://api.example.com/v1/things", { retries = 3, retry_max_delay = 60 })
  self.result.result.status = resp.status
  self.result.result.left = time.remaining()
  self.result.status = 0
end

function Deadline:confirm(input)
  while true do
    time.sleep(45)
  end
end

function Deadline:delete(input)
  self.result.status = 0
end
