-- State kept per host in the automator's work dir, under a lock so that
-- concurrent tasks for the same host do not lose updates.
local json = require("loom.json")
local fs = require("loom.fs")

local M = {}

function M.update(hostname, fn)
  local file = "state/" .. tostring(hostname) .. ".json"
  return fs.with_lock(file .. ".lock", function()
    local st = {}
    if fs.exists(file) then st = json.decode(fs.read(file)) end
    fn(st)
    fs.write(file, json.encode(st, { indent = "  " }))
    return st
  end)
end

return M
