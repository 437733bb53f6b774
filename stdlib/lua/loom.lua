-- loom: base tables for Loom plugins, the twins of Coopr's
-- Coopr::Plugin::Provider and Coopr::Plugin::Automator classes.
--
--   local loom = require("loom")
--   MyCloud = loom.Provider:extend("MyCloud")
--   function MyCloud:create(input) ... end
--
-- A hook that a plugin does not override fails with
-- "unimplemented <hook> in <classname>", as Coopr's base classes did.

local loom = { version = "1" }

-- defaults marks the base hooks, so `loomd plugins check` can tell a hook
-- the plugin defines from one it inherits and that would fail.
local defaults = {}
loom._defaults = defaults

local function unimplemented(hook)
  local f = function(self)
    error(("unimplemented %s in %s"):format(hook, tostring(self.classname or "?")), 2)
  end
  defaults[f] = hook
  return f
end

local Base = { classname = "Base" }
Base.__index = Base

--- Creates a table that inherits from this one. `name` becomes its
--- classname; `fields` (optional) are copied into it.
function Base:extend(name, fields)
  local cls = {}
  if fields ~= nil then
    for k, v in pairs(fields) do cls[k] = v end
  end
  cls.classname = name or cls.classname
  cls.__index = cls
  return setmetatable(cls, { __index = self })
end

--- Fails the task with a message, like Ruby's raise.
function Base:fail(message, status)
  self.result.status = status or 1
  self.result.message = message
  error(message, 2)
end

local Provider = Base:extend("Provider")
for _, hook in ipairs({ "create", "confirm", "delete" }) do
  Provider[hook] = unimplemented(hook)
end

local Automator = Base:extend("Automator")
for _, hook in ipairs({ "bootstrap", "install", "configure", "init", "start", "stop", "remove" }) do
  Automator[hook] = unimplemented(hook)
end

loom.Base = Base
loom.Provider = Provider
loom.Automator = Automator
return loom
