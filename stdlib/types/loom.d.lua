---@meta loom
-- LuaLS stubs for require("loom"), the base tables of Loom plugins.

---@class LoomInstance
---@field task table the whole Coopr task
---@field result table the auto-vivifying result map
---@field env {work_dir: string, work_root: string, tenant: string, type: string, family: string, plugin_dir: string, hook: string, task_id: string}
---@field classname string

---@class LoomBase: LoomInstance
local Base = {}

--- Creates a table inheriting from this one; `name` becomes its classname.
---@param name string
---@param fields? table
---@return table
function Base:extend(name, fields) end

--- Sets status and message, then raises: fails the task.
---@param message string
---@param status? integer
function Base:fail(message, status) end

---@class LoomProvider: LoomBase
local Provider = {}
---@param input {flavor: string, image: string, hostname: string, fields: table}
function Provider:create(input) end
---@param input {providerid: string, fields: table}
function Provider:confirm(input) end
---@param input {providerid: string, fields: table}
function Provider:delete(input) end

---@alias LoomAutomatorInput {hostname: string, ipaddress: string, sshauth: {user: string, password?: string, identityfile?: string, port?: integer}, fields: table}

---@class LoomAutomator: LoomBase
local Automator = {}
---@param input {hostname: string, ipaddress: string, sshauth: table}
function Automator:bootstrap(input) end
---@param input LoomAutomatorInput
function Automator:install(input) end
---@param input LoomAutomatorInput
function Automator:configure(input) end
---@param input LoomAutomatorInput
function Automator:init(input) end
---@param input LoomAutomatorInput
function Automator:start(input) end
---@param input LoomAutomatorInput
function Automator:stop(input) end
---@param input LoomAutomatorInput
function Automator:remove(input) end

-- The called kinds' base tables are in loom.kinds.d.lua (generated).
return {Base = Base, Provider = Provider, Automator = Automator, Kind = LoomKind, ClusterDriver = LoomClusterDriver,
  BucketProvisioner = LoomBucketProvisioner, CloudProvider = LoomCloudProvider, KloudProvider = LoomKloudProvider, version = "1"}
