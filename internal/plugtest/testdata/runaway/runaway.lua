local loom = require("loom")
Runaway = loom.Provider:extend("Runaway")

local function spin(n)
  local x = 0
  while true do
    x = x + n
  end
end

function Runaway:create(input)
  spin(1)
end
