-- A skeleton provider: the Lua twin of Coopr's provider skeleton.
--
-- A provider gets machines from somewhere. Loom calls its hooks with
-- `self` (a fresh instance per task) and an `input` map:
--   create(input)   input.flavor, input.image, input.hostname, input.fields
--   confirm(input)  input.providerid, input.fields
--   delete(input)   input.providerid, input.fields
-- self.task is the whole task, self.env the work dir and tenant, and
-- self.result the auto-vivifying result map sent back to Coopr.
--
-- This one keeps its "machines" as JSON files under its work dir
-- (<work-dir>/<tenant>/providertypes/skeleton/machines/), so it runs
-- anywhere. Copy it, then replace the file writes with your cloud's API
-- calls (require("loom.http")).

local loom = require("loom")
local json = require("loom.json")
local fs = require("loom.fs")

SkeletonProvider = loom.Provider:extend("SkeletonProvider")

local function machine_file(id)
  return "machines/" .. id .. ".json"
end

function SkeletonProvider:create(input)
  local fields = input.fields
  -- Ids travel as strings: Lua numbers lose precision past 2^53.
  local id = "skel-" .. (self.task.nodeId or self.task.taskId)
  log.info("creating %s as %s (flavor %s, image %s, region %s)",
    tostring(input.hostname), id, tostring(input.flavor), tostring(input.image), fields.region)
  fs.write(machine_file(id), json.encode({
    id = id,
    hostname = input.hostname,
    flavor = input.flavor,
    image = input.image,
    region = fields.region,
    state = "active",
  }))
  -- Coopr's conventions: later tasks receive these keys at the top level
  -- of their config (config.providerid, config["ssh-auth"]).
  self.result.result.providerid = id
  self.result.result["ssh-auth"].user = fields.ssh_user
  self.result.status = 0
end

function SkeletonProvider:confirm(input)
  local id = input.providerid
  if id == nil or not fs.exists(machine_file(id)) then
    -- error() fails the task with status 1; the message names this line.
    error("no machine " .. tostring(id) .. " to confirm; was CREATE run?")
  end
  local m = json.decode(fs.read(machine_file(id)))
  self.result.ipaddresses = { access_v4 = input.fields.address, bind_v4 = input.fields.address }
  self.result.hostname = m.hostname
  self.result.result.confirmed_at = os.time()
  self.result.status = 0
end

function SkeletonProvider:delete(input)
  -- Idempotent: deleting a machine that is already gone succeeds.
  local removed = input.providerid ~= nil and fs.remove(machine_file(input.providerid))
  log.info("deleted %s (existed: %s)", tostring(input.providerid), tostring(removed))
  self.result.status = 0
end
