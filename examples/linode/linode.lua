-- Linode: a Loom provider for Linode instances, from Linode's API v4.
-- Started with `loomd new provider linode`; the API calls are in
-- lib/linode/client.lua.
--
-- A provider gets machines from somewhere. loomd calls its hooks with
-- `self` (a fresh instance per task) and `input`:
--   create(input)   input.flavor (a Linode type), input.image, input.hostname, input.fields
--   confirm(input)  input.providerid, input.fields
--   delete(input)   input.providerid, input.fields
-- input.fields are linode.json's parameters, with defaults filled in and
-- `required` checked before the hook runs.

local loom = require("loom")
local time = require("loom.time")
local client = require("lib.linode.client")

---@class LinodeProvider: loom.Provider
LinodeProvider = loom.Provider:extend("LinodeProvider")

-- CREATE makes the instance and returns its id as providerid. Coopr
-- retries tasks: the node's instance is found by its label first, so a
-- retry never makes a second one.
function LinodeProvider:create(input)
  local f = input.fields
  local label = client.label(input.hostname)
  local inst = client.find(f, label)
  if inst then
    log.info("linode %s (%s) already exists: reusing it", inst.id, label)
  else
    local keys = nil
    if f.authorized_key and f.authorized_key ~= "" then keys = { f.authorized_key } end
    inst = client.request(f, "POST", "/linode/instances", {
      label = label,
      region = f.region,
      type = input.flavor,
      image = input.image,
      root_pass = f.root_pass,
      authorized_keys = keys,
      tags = { "loom" },
    })
    log.info("created linode %s (%s) in %s", inst.id, label, f.region)
  end
  -- Later tasks of this node receive these keys at the top of their config.
  self.result.result.providerid = tostring(inst.id)
  self.result.result["ssh-auth"] = { user = "root", password = f.root_pass }
  self.result.status = 0
end

-- addresses are the instance's public and private IPv4 addresses.
function LinodeProvider:addresses(inst)
  local public, private
  for _, ip in ipairs(inst.ipv4 or {}) do
    if ip:match("^192%.168%.") or ip:match("^10%.") then private = private or ip else public = public or ip end
  end
  return { access_v4 = public or private, bind_v4 = private or public }
end

-- CONFIRM waits until the instance runs and reports its addresses, which
-- the automators SSH to.
function LinodeProvider:confirm(input)
  local f = input.fields
  local interval = tonumber(f.poll_interval) or 5
  while true do
    local inst = client.request(f, "GET", "/linode/instances/" .. input.providerid)
    if inst == nil then
      error({ kind = "not_found", message = ("linode %s does not exist (deleted outside Loom?)"):format(input.providerid) }, 0)
    end
    if inst.status == "running" then
      self.result.ipaddresses = self:addresses(inst)
      self.result.hostname = inst.label
      self.result.status = 0
      return
    end
    log.info("linode %s is %s; checking again in %ss", inst.id, tostring(inst.status), interval)
    -- sleep stops at the hook's deadline (timeouts.confirm in linode.json).
    time.sleep(interval)
  end
end

-- DELETE destroys the instance. It must succeed when the instance is
-- already gone (Coopr sends DELETE again after failures), and find the
-- node's instance by its label when CREATE's result was lost.
function LinodeProvider:delete(input)
  local f = input.fields
  local id = input.providerid
  if id == nil or id == "" then
    local inst = client.find(f, client.label(self.task.config.hostname or ""))
    if inst == nil then
      log.info("no providerid and no instance labelled for this node: nothing to delete")
      self.result.status = 0
      return
    end
    id = tostring(inst.id)
  end
  local _, status = client.request(f, "DELETE", "/linode/instances/" .. id)
  log.info("linode %s %s", id, status == 404 and "was already gone" or "deleted")
  self.result.status = 0
end
