---@meta loom
-- LuaLS stubs for require("loom"), the base tables of Loom plugins.

--- The Coopr task a hook runs.
---@class loom.Task
---@field taskId string
---@field taskName string
---@field jobId string
---@field clusterId string
---@field nodeId string
---@field tenantId? string
---@field config table the node's config: hostname, provider, automators, service, ipaddresses, ssh-auth, ...

--- The result a hook sends back (auto-vivifying: self.result.result.x = 1 makes the tables).
---@class loom.Result
---@field status integer 0 on success
---@field message? string
---@field stdout? string
---@field stderr? string
---@field result table keys later tasks of the node receive at the top of their config (providerid, ssh-auth, ...)
---@field ipaddresses table {access_v4 =, bind_v4 =, ...}
---@field hostname? string

---@class loom.Env
---@field work_dir string
---@field work_root string
---@field tenant string
---@field type string
---@field family string
---@field plugin_dir string
---@field hook string
---@field task_id string

---@class LoomInstance
---@field task loom.Task the whole Coopr task
---@field result loom.Result the auto-vivifying result map
---@field env loom.Env
---@field classname string

---@class LoomBase: LoomInstance
local Base = {}

--- Creates a table inheriting from this one; `name` becomes its classname.
--- Declare the class above the call, and hooks get their types:
---   ---@class MyProvider: loom.Provider
---   MyProvider = loom.Provider:extend("MyProvider")
---@generic T
---@param name `T`
---@param fields? table
---@return T
function Base:extend(name, fields) end

--- Sets status and message, then raises: fails the task.
---@param message string
---@param status? integer
function Base:fail(message, status) end

---@class loom.Base: LoomBase

---@class loom.ProviderInput
---@field fields table<string, any> the definition's parameters, defaults filled in, required checked
---@field hostname string
---@field flavor? string
---@field image? string
---@field providerid? string

---@class loom.CreateInput: loom.ProviderInput
---@field flavor string
---@field image string

---@class loom.ConfirmInput: loom.ProviderInput
---@field providerid string

---@class loom.DeleteInput: loom.ProviderInput
---@field providerid? string absent when CREATE's result was lost: find the node's machine another way

---@class LoomProvider: LoomBase
local Provider = {}
---@param input loom.CreateInput
function Provider:create(input) end
---@param input loom.ConfirmInput
function Provider:confirm(input) end
---@param input loom.DeleteInput
function Provider:delete(input) end

---@class loom.Provider: LoomProvider

---@alias LoomAutomatorInput {hostname: string, ipaddress: string, sshauth: {user: string, password?: string, identityfile?: string, port?: integer}, fields: table<string, any>}

---@class loom.AutomatorInput
---@field hostname string
---@field ipaddress string
---@field sshauth {user: string, password?: string, identityfile?: string, port?: integer}
---@field fields table<string, any> the definition's parameters, defaults filled in, required checked

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

---@class loom.Automator: LoomAutomator

-- What the sandbox keeps of Lua's os and debug libraries (the editor's
-- own os and debug are off in .luarc.json, so these are all it offers).
os = {}
---@param t? table
---@return integer
function os.time(t) end
---@return number
function os.clock() end
---@param format? string
---@param time? integer
---@return string|table
function os.date(format, time) end
debug = {}
---@param message? string
---@param level? integer
---@return string
function debug.traceback(message, level) end

-- The called kinds' base tables are in loom.kinds.d.lua (generated).
return {Base = Base, Provider = Provider, Automator = Automator, Kind = LoomKind, ClusterDriver = LoomClusterDriver,
  BucketProvisioner = LoomBucketProvisioner, CloudProvider = LoomCloudProvider, KloudProvider = LoomKloudProvider, version = "1"}
