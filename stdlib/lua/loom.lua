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
for _, hook in ipairs({ "bootstrap", "install", "configure", "init", "start", "stop", "remove", "check" }) do
  Automator[hook] = unimplemented(hook)
end

-- Called kinds (cluster drivers, bucket provisioners, cloud providers,
-- Kloud providers): a hook takes one table and returns its result, or
-- nil and an error. Their base tables define no hooks: the host answers
-- for an absent optional hook as the kind's contract says (docs/kinds).
local Kind = Base:extend("Kind")

--- Fails the call with a classified error: class is "retry" (default),
--- "terminal" or "not_found"; reason is one the kind's contract names.
function Kind:fail(message, class, reason)
  error({ class = class or "retry", reason = reason, message = message }, 2)
end

local ClusterDriver = Kind:extend("ClusterDriver")

-- The DriverOptions map each option type reads, and its zero value.
local option_maps = { string = "string", bool = "bool", int = "int", string_slice = "string_slice",
  stringSlice = "string_slice", intPtr = "int", boolPtr = "bool" }
local option_zero = { string = "", bool = false, int = 0 }

--- Reads a DriverOptions value of type typ under the first of the keys
--- present, as kontainer-engine's GetValueFromDriverOptions does: Rancher
--- passes schema field names (diskSizeGb), the CLI flag names
--- (disk-size-gb). typ is a flag type ("string", "bool", "int",
--- "stringSlice", "intPtr", "boolPtr") or a DriverOptions key ("string",
--- "bool", "int", "string_slice"). A missing value is the type's zero value
--- ("", false, 0, {}), and nil for "intPtr" and "boolPtr", whose Go
--- drivers get a nil pointer: "not set" apart from 0 and false.
function ClusterDriver:option(opts, typ, ...)
  local key = option_maps[typ]
  if key == nil then
    error(("option: unknown option type %q (want string, bool, int, stringSlice, intPtr or boolPtr)"):format(tostring(typ)), 2)
  end
  local m = opts and opts[key] or {}
  for _, k in ipairs({ ... }) do
    if m[k] ~= nil then return m[k] end
  end
  if typ == "intPtr" or typ == "boolPtr" then return nil end
  if key == "string_slice" then return {} end
  return option_zero[key]
end

--- Decodes cluster_info.metadata.state (JSON), the driver's state between
--- calls; {} when there is none.
function ClusterDriver:state(ci)
  local s = ci and ci.metadata and ci.metadata.state
  if s == nil or s == "" then return {} end
  return require("loom.json").decode(s)
end

--- Stores t as cluster_info.metadata.state and returns ci.
function ClusterDriver:set_state(ci, t)
  ci.metadata = ci.metadata or {}
  ci.metadata.state = require("loom.json").encode(t)
  return ci
end

loom.Base = Base
loom.Provider = Provider
loom.Automator = Automator
loom.Kind = Kind
loom.ClusterDriver = ClusterDriver
loom.BucketProvisioner = Kind:extend("BucketProvisioner")
loom.CloudProvider = Kind:extend("CloudProvider")
loom.KloudProvider = Kind:extend("KloudProvider")
return loom
