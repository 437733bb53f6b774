Failing = require("loom").Provider:extend("Failing")
function Failing:create(input) error("create broke") end
function Failing:confirm(input)
  require("loom.http").get("https://h.example.com/")
  self.result.status = 0
end
function Failing:delete(input) self.result.status = 0 end
