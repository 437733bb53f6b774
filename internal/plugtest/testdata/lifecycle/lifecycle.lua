local loom = require("loom")
Lifecycle = loom.Provider:extend("Lifecycle")
counter = 0
function Lifecycle:create(input)
  counter = counter + 1
  self.result.result.counter = counter
  self.result.status = 0
end
function Lifecycle:confirm(input) self.result.status = 0 end
function Lifecycle:delete(input) self.result.status = 0 end
