local loom = require("loom")
local api = require("lib.api")

SpyFailing = loom.Provider:extend("SpyFailing")

function SpyFailing:create(input)
  local made = api.request(input.fields, "POST", "/v1/servers", { name = api.label(input.hostname) })
  self:remember(made.id)
  self.result.result.providerid = tostring(made.id)
  self.result.status = 0
end

function SpyFailing:remember(id)
  self.result.result.remembered = id
end

function SpyFailing:confirm(input)
  self.result.status = 0
end

function SpyFailing:delete(input)
  local ok, err = pcall(api.request, input.fields, "DELETE", "/v1/servers/" .. input.providerid)
  if not ok and err.status ~= 404 then error(err, 0) end
  self.result.status = 0
end
