-- AWS provider: EC2 instances through the EC2 Query API, signed with
-- Signature Version 4 in Lua (lib/sigv4.lua, on loom.crypto).
--
--   create(input)   launches (or finds again) the node's instance
--   confirm(input)  waits until it runs, reports its addresses, and records
--                   its SSH host keys from the console output
--   delete(input)   terminates it
--
-- Every instance (and its volumes) carries the tags Name, coopr-cluster and
-- coopr-node. A CREATE that runs again finds the node's live instance by
-- its tag; one whose earlier answer was lost sends RunInstances again with
-- the same ClientToken, derived from the node and the request, and EC2
-- answers with the instance it made the first time instead of a second
-- one. DELETE without a providerid finds the instance by the node tag.
--
-- Credentials come from the fields (api_user, api_password and
-- aws_session_token), never from an instance profile (IMDS). Failures raise
-- an error table {kind, message, ...}; on CREATE, credentials EC2 refuses
-- set Coopr's "nothing was created" status (201, or 202 for a user without
-- the permission).

local loom = require("loom")
local fs = require("loom.fs")
local crypto = require("loom.crypto")
local xml = require("loom.xml")
local ec2 = require("lib.ec2")

local have_time, time = pcall(require, "loom.time")
if not have_time then time = nil end

AWS = loom.Provider:extend("AWS")
-- Coopr's fog_provider.json names the class FogProviderAWS: the same
-- table serves it, so that definition loads unchanged.
FogProviderAWS = AWS

-- Instance states that still hold (or will hold) a machine.
local LIVE = { "pending", "running", "stopping", "stopped" }

-- How many terminated instances one node's ClientToken chain may pass
-- (one per DELETE and CREATE of the node within EC2's token lifetime).
local MAX_TOKEN_HOPS = 20

-- An instance EC2 does not know yet (its API is eventually consistent)
-- is waited for this long by CONFIRM before it is called gone; launched
-- less than this ago, an unknown instance is a new one, not a vanished one
-- (EC2 shows terminated instances for about an hour).
local NOT_FOUND_GRACE = 120
local VANISHED_AFTER = 3600

-- Helpers ----------------------------------------------------------------

local function fail(self, err, status)
  if type(err) ~= "table" then
    err = { kind = "aws", message = tostring(err) }
  end
  self.result.status = status or 1
  error(err, 0)
end

-- Coopr hands field values over as strings ("true", "5"); definition
-- defaults arrive as JSON booleans and numbers. Accept both.
local function truthy(v, default)
  if v == nil or v == "" then return default end
  if type(v) == "boolean" then return v end
  local s = tostring(v):lower()
  return s == "true" or s == "1" or s == "yes" or s == "on"
end

local function split_list(s)
  local out = {}
  for item in tostring(s or ""):gmatch("[^,]+") do
    item = item:match("^%s*(.-)%s*$")
    if item ~= "" then out[#out + 1] = item end
  end
  return out
end

local function number(v, default)
  local n = tonumber(v)
  if n == nil then return default end
  return n
end

-- The node's id: the instance's identity for idempotency and cleanup.
local function node_id(task)
  return tostring(task.nodeId or task.taskId)
end

-- The name of the key pair Loom generates for a node (EC2 key names are
-- printable ASCII, up to 255).
local function generated_key_name(node)
  return ("loom-" .. node:gsub("[^%w%._%-]", "-")):sub(1, 255)
end

local function client(self, f)
  local ok, c = pcall(ec2.new, {
    region = f.aws_region, access_key = f.api_user, secret_key = f.api_password,
    session_token = f.aws_session_token, endpoint = f.aws_endpoint, timeout = f.api_timeout,
  })
  if not ok then fail(self, c) end
  return c
end

-- raise fails the hook with err; on CREATE, a credential EC2 refuses is
-- Coopr's "nothing was created" (201; 202 without the permission).
local function raise(self, err, creating)
  local status = 1
  if creating and type(err) == "table" and err.kind == "aws" then
    if ec2.AUTH_FAILED[err.code] then
      status = 201
      err.message = err.message .. "; check api_user, api_password (and aws_session_token)"
    elseif ec2.NOT_PERMITTED[err.code] then
      status = 202
    end
  end
  fail(self, err, status)
end

-- call sends an action and returns its answer, or fails the hook.
local function call(self, c, action, params, creating)
  local ok, doc = pcall(c.call, c, action, params)
  if ok then return doc end
  raise(self, doc, creating)
end

-- try_call is call returning false and the error instead of raising.
local function try_call(c, action, params)
  return pcall(c.call, c, action, params)
end

local function pause(self, seconds, why)
  if not time then
    fail(self, why .. "; waiting needs the loom.time module, which this loomd does not provide")
  end
  if seconds > ec2.remaining() then
    fail(self, why .. (" and the hook deadline leaves no time to wait %.1fs more (raise timeouts.%s in aws.json)")
      :format(seconds, self.env.hook))
  end
  time.sleep(seconds)
end

-- ISO 8601 (EC2's launchTime) to epoch seconds, UTC.
local function epoch(iso)
  local y, mo, d, h, mi, s = tostring(iso or ""):match("^(%d+)-(%d+)-(%d+)T(%d+):(%d+):(%d+)")
  if not y then return nil end
  -- Days from the civil date (Howard Hinnant's algorithm): os.time would
  -- read the fields as local time.
  y, mo, d = tonumber(y), tonumber(mo), tonumber(d)
  if mo <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (mo + 9) % 12
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  local days = era * 146097 + doe - 719468
  return days * 86400 + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(s)
end

local function instance_id(self, providerid)
  local id = tostring(providerid or "")
  if not id:match("^i%-%x+$") then
    fail(self, ("providerid %q is not an EC2 instance id (i-...); was CREATE run by this provider?"):format(id))
  end
  return id
end

-- describe returns the instance with id, or nil when EC2 does not know it.
local function describe(self, c, id)
  local ok, doc = try_call(c, "DescribeInstances", { ["InstanceId.1"] = id })
  if not ok then
    if type(doc) == "table" and (doc.code == "InvalidInstanceID.NotFound" or doc.code == "InvalidInstanceID.Malformed") then
      return nil
    end
    fail(self, doc)
  end
  return ec2.instances(doc)[1]
end

-- The most DescribeInstances pages one lookup reads: a node's tag
-- matches a handful of instances, so more means a token that never ends.
local MAX_PAGES = 100

-- find_live returns the node's instances that are not terminated, oldest
-- first. It reads every page of the answer: DELETE without a providerid
-- terminates all of them, and an instance left on a later page would
-- keep running (and billing) unseen.
local function find_live(self, c, node, creating)
  local params = ec2.add_filters({}, {
    { "tag:coopr-node", { node } },
    { "instance-state-name", LIVE },
  })
  local found = {}
  for page = 1, MAX_PAGES + 1 do
    if page > MAX_PAGES then
      fail(self, ("EC2 DescribeInstances in %s: still a nextToken after %d pages of instances tagged coopr-node=%s; "
        .. "look for a stuck paging token or far too many tagged instances"):format(c.region, MAX_PAGES, node))
    end
    local doc = call(self, c, "DescribeInstances", params, creating)
    for _, inst in ipairs(ec2.instances(doc)) do found[#found + 1] = inst end
    local token = type(doc) == "table" and doc.nextToken or nil
    if type(token) ~= "string" or token == "" then break end
    params.NextToken = token
  end
  table.sort(found, function(a, b)
    if a.launchTime ~= b.launchTime then return tostring(a.launchTime) < tostring(b.launchTime) end
    return a.instanceId < b.instanceId
  end)
  return found
end

-- CREATE -----------------------------------------------------------------

-- The tags of the node's instance and volumes: Name, coopr-cluster,
-- coopr-node and the extra tags field (key=value, comma-separated).
local function tags(self, f, hostname)
  local out = {
    { "Name", hostname },
    { "coopr-cluster", tostring(self.task.clusterId or "") },
    { "coopr-node", node_id(self.task) },
  }
  for _, kv in ipairs(split_list(f.tags)) do
    local k, v = kv:match("^([^=]+)=(.*)$")
    if not k then
      fail(self, ("tags: %q is not key=value (tags are comma-separated key=value pairs)"):format(kv))
    end
    k = k:match("^%s*(.-)%s*$")
    if k == "Name" or k == "coopr-cluster" or k == "coopr-node" then
      fail(self, ("tags: %q is set by the provider and cannot be given"):format(k))
    end
    out[#out + 1] = { k, v }
  end
  return out
end

-- Per VM: the images' root devices, by region and image id.
local image_cache = {}
local IMAGE_TTL = 3600

-- root_device describes the image: its root device name and type, and
-- the root snapshot's size in GiB.
local function root_device(self, c, image)
  local key = c.region .. "/" .. image
  local hit = image_cache[key]
  if hit and ec2.now() - hit.at < IMAGE_TTL then return hit end
  local doc = call(self, c, "DescribeImages", { ["ImageId.1"] = image }, true)
  local img = xml.list(doc.imagesSet and doc.imagesSet.item)[1]
  if not img then
    fail(self, ("EC2 DescribeImages in %s: no image %s (is it in this region, and shared with this account?)"):format(c.region, image), 1)
  end
  local size
  for _, m in ipairs(xml.list(img.blockDeviceMapping and img.blockDeviceMapping.item)) do
    if m.deviceName == img.rootDeviceName and type(m.ebs) == "table" then size = tonumber(m.ebs.volumeSize) end
  end
  hit = { at = ec2.now(), name = img.rootDeviceName, type = img.rootDeviceType, size = size }
  image_cache[key] = hit
  return hit
end

-- same_key compares two OpenSSH public key lines by type and blob.
local function same_key(a, b)
  local ta, ba = tostring(a or ""):match("^(%S+)%s+(%S+)")
  local tb, bb = tostring(b or ""):match("^(%S+)%s+(%S+)")
  return ta ~= nil and ta == tb and ba == bb
end

-- ensure_key makes sure the node's generated key exists in the work dir
-- (ssh_keys/loom-<node>, an OpenSSH private key the automators use) and
-- in EC2 as key pair loom-<node>. Returns the key name, the file and
-- whether this call imported the key pair.
local function ensure_key(self, c, f, node)
  local name = generated_key_name(node)
  local path = "ssh_keys/" .. name
  return fs.with_lock("locks/" .. name .. ".lock", function()
    local key
    if fs.exists(path) then
      key = crypto.key({ resource = path })
    else
      key = crypto.generate_key({ type = f.ssh_key_type ~= "" and f.ssh_key_type or "ed25519", path = path, comment = name })
      log.info("generated an %s key for node %s in %s", key.type, node, path)
    end
    local import = ec2.add_tag_spec({ KeyName = name, PublicKeyMaterial = crypto.base64_encode(key.public_ssh) }, 1, "key-pair", {
      { "coopr-cluster", tostring(self.task.clusterId or "") }, { "coopr-node", node },
    })
    local ok, err = try_call(c, "ImportKeyPair", import)
    if ok then
      log.info("imported key pair %s (%s)", name, key.fingerprint)
      return name, path, true
    end
    if type(err) ~= "table" or err.code ~= "InvalidKeyPair.Duplicate" then
      raise(self, err, true)
    end
    local doc = call(self, c, "DescribeKeyPairs", { ["KeyName.1"] = name, IncludePublicKey = true }, true)
    local kp = xml.list(doc.keySet and doc.keySet.item)[1] or {}
    if same_key(kp.publicKey, key.public_ssh) then
      return name, path, false
    end
    -- The key pair holds a key this work dir no longer has (the file was
    -- lost, or another loomd made it): replace it, so the automators can
    -- log in with the key they are given.
    log.warn("key pair %s in %s does not hold the key in %s: replacing it", name, c.region, path)
    call(self, c, "DeleteKeyPair", { KeyName = name }, true)
    call(self, c, "ImportKeyPair", import, true)
    return name, path, true
  end)
end

-- run_params builds the RunInstances parameters (without ClientToken).
local function run_params(self, c, f, input, key_name)
  local p = {
    ImageId = tostring(input.image),
    InstanceType = tostring(input.flavor),
    MinCount = 1,
    MaxCount = 1,
  }
  if key_name then p.KeyName = key_name end
  local subnet = f.subnet_id
  local ids = split_list(f.security_group_ids)
  if subnet ~= nil and subnet ~= "" then
    -- A VPC subnet: groups by id; a public address through the network
    -- interface (EC2 refuses instance-level SubnetId and groups next to
    -- a network interface).
    if truthy(f.associate_public_ip, true) then
      p["NetworkInterface.1.DeviceIndex"] = 0
      p["NetworkInterface.1.SubnetId"] = subnet
      p["NetworkInterface.1.AssociatePublicIpAddress"] = true
      p["NetworkInterface.1.DeleteOnTermination"] = true
      ec2.add_list(p, "NetworkInterface.1.SecurityGroupId", ids)
    else
      p.SubnetId = subnet
      ec2.add_list(p, "SecurityGroupId", ids)
    end
    if #split_list(f.security_groups) > 0 and f.security_groups ~= "default" then
      log.warn("security_groups (%s) is not used with subnet_id: give security_group_ids", tostring(f.security_groups))
    end
    if truthy(f.dedicated_instance, false) then p["Placement.Tenancy"] = "dedicated" end
  else
    ec2.add_list(p, "SecurityGroup", split_list(f.security_groups))
    ec2.add_list(p, "SecurityGroupId", ids)
    if truthy(f.dedicated_instance, false) then
      log.warn("dedicated_instance needs subnet_id (VPC only): ignored")
    end
  end
  if f.availability_zone and f.availability_zone ~= "" then p["Placement.AvailabilityZone"] = f.availability_zone end
  if f.placement_group and f.placement_group ~= "" then p["Placement.GroupName"] = f.placement_group end
  if f.iam_instance_profile and f.iam_instance_profile ~= "" then p["IamInstanceProfile.Name"] = f.iam_instance_profile end
  if f.user_data and f.user_data ~= "" then p.UserData = crypto.base64_encode(f.user_data) end

  local root = root_device(self, c, p.ImageId)
  if root.type == "ebs" and root.name then
    local size = math.floor(number(f.aws_root_ebs_size, 0))
    if root.size and size < root.size then
      if size > 0 then
        log.info("aws_root_ebs_size %d is smaller than image %s's root snapshot (%d GiB): using %d", size, p.ImageId, root.size, root.size)
      end
      size = root.size
    end
    p["BlockDeviceMapping.1.DeviceName"] = root.name
    if size > 0 then p["BlockDeviceMapping.1.Ebs.VolumeSize"] = size end
    if f.aws_root_ebs_volume_type and f.aws_root_ebs_volume_type ~= "" then
      p["BlockDeviceMapping.1.Ebs.VolumeType"] = f.aws_root_ebs_volume_type
    end
    p["BlockDeviceMapping.1.Ebs.DeleteOnTermination"] = truthy(f.aws_root_ebs_delete_on_term, true)
  end
  local t = tags(self, f, input.hostname)
  ec2.add_tag_spec(p, 1, "instance", t)
  ec2.add_tag_spec(p, 2, "volume", t)
  return p
end

-- digest identifies the request: the same node and parameters give the
-- same ClientToken, so a CREATE sent again gets the instance it made.
local function digest(params)
  local names = {}
  for k in pairs(params) do names[#names + 1] = k end
  table.sort(names)
  local parts = {}
  for _, k in ipairs(names) do parts[#parts + 1] = k .. "=" .. tostring(params[k]) end
  return crypto.sha256(table.concat(parts, "\n"))
end

local function token(node, d, after)
  -- At most 64 ASCII characters.
  return "loom-" .. crypto.sha256(node .. "\n" .. d .. "\n" .. (after or "")):sub(1, 40)
end

-- gone reports whether an instance RunInstances handed back (its
-- ClientToken's) is terminated: its answer says so, or EC2 no longer shows
-- it although it was launched long ago.
local function gone(self, c, inst)
  local state = inst.instanceState and inst.instanceState.name
  if state == "terminated" or state == "shutting-down" then return true end
  local now = describe(self, c, inst.instanceId)
  if now then
    state = now.instanceState and now.instanceState.name
    return state == "terminated" or state == "shutting-down"
  end
  local launched = epoch(inst.launchTime)
  return launched ~= nil and ec2.now() - launched > VANISHED_AFTER
end

-- run_instance launches the node's instance. The ClientToken starts from
-- the node and the parameters; when EC2 answers it with an instance that
-- was terminated since (the node was deleted and is created again), the
-- next token is derived from that instance, so every retry of this CREATE
-- follows the same chain to the same new instance.
local function run_instance(self, c, p, node)
  local d = digest(p)
  local tok = token(node, d)
  for _ = 1, MAX_TOKEN_HOPS do
    p.ClientToken = tok
    local doc = call(self, c, "RunInstances", p, true)
    local inst = xml.list(doc.instancesSet and doc.instancesSet.item)[1]
    if not inst then
      fail(self, ("EC2 RunInstances in %s answered without an instance (reservation %s)"):format(c.region, tostring(doc.reservationId)))
    end
    if not gone(self, c, inst) then
      return inst
    end
    log.info("ClientToken %s belongs to instance %s, terminated since: launching with the next token", tok, inst.instanceId)
    tok = token(node, d, inst.instanceId)
  end
  fail(self, ("node %s was launched and terminated %d times with this request: giving up (change a field, or wait a day for EC2 to forget the tokens)")
    :format(node, MAX_TOKEN_HOPS))
end

function AWS:create(input)
  local f = input.fields
  if input.flavor == nil or input.image == nil or input.hostname == nil then
    fail(self, "CREATE needs config.flavor (an instance type), config.image (an AMI id) and config.hostname")
  end
  local c = client(self, f)
  local node = node_id(self.task)
  local generated = f.ssh_keypair == nil or f.ssh_keypair == ""

  local live = find_live(self, c, node, true)
  local inst = live[1]
  local key_file
  if inst then
    if #live > 1 then
      local others = {}
      for i = 2, #live do others[#others + 1] = live[i].instanceId end
      log.warn("%d instances carry the tag coopr-node=%s; using %s, terminate the others: %s", #live, node,
        inst.instanceId, table.concat(others, ", "))
    end
    log.info("instance %s (%s) already exists for node %s: reusing it", inst.instanceId,
      tostring(inst.instanceState and inst.instanceState.name), node)
    if generated then key_file = "ssh_keys/" .. generated_key_name(node) end
  else
    local key_name, imported
    if generated then
      key_name, key_file, imported = ensure_key(self, c, f, node)
    else
      key_name = f.ssh_keypair
    end
    local p = run_params(self, c, f, input, key_name)
    log.info("launching a %s instance of %s in %s for node %s", p.InstanceType, p.ImageId, c.region, node)
    local ok, res = pcall(run_instance, self, c, p, node)
    if not ok then
      if imported then
        -- Nothing uses the key pair this CREATE imported: do not leave it.
        local dok, derr = try_call(c, "DeleteKeyPair", { KeyName = key_name })
        if not dok then log.warn("could not delete key pair %s: %s", key_name, tostring(derr.message)) end
      end
      error(res, 0)
    end
    inst = res
    log.info("launched instance %s", inst.instanceId)
  end

  self.result.result.providerid = inst.instanceId
  self.result.result["ssh-auth"].user = self.task.config.sshuser or "root"
  if key_file == nil and f.ssh_key_resource ~= nil and f.ssh_key_resource ~= "" then
    local name = f.ssh_key_resource
    if name:find("/", 1, true) or name == ".." then
      fail(self, ("ssh_key_resource %q must be a file name in the ssh_keys resource, not a path"):format(name))
    end
    key_file = "ssh_keys/" .. name
  end
  -- The automators dial ssh-auth.port (22 when absent).
  local port = tonumber(f.ssh_port)
  if port and port ~= 22 then self.result.result["ssh-auth"].port = port end
  if key_file then
    if not fs.exists(key_file) then
      log.warn("the private key %s is not in the work dir; automators will need it", key_file)
    end
    self.result.result["ssh-auth"].identityfile = self.env.work_dir .. "/" .. key_file
  end
  self.result.status = 0
end

-- CONFIRM ----------------------------------------------------------------

local function wait_running(self, c, id, interval)
  local last, missing_since = nil, nil
  while true do
    local inst = describe(self, c, id)
    if inst == nil then
      missing_since = missing_since or ec2.now()
      local waited = ec2.now() - missing_since
      if waited + interval > NOT_FOUND_GRACE or interval > ec2.remaining() or not time then
        fail(self, ("EC2 has no instance %s in %s (not visible for %ds: terminated long ago, or made in another region?)")
          :format(id, c.region, math.floor(waited)))
      end
      time.sleep(interval)
    else
      local state = inst.instanceState and inst.instanceState.name
      if state ~= last then
        log.info("instance %s is %s", id, tostring(state))
        last = state
      end
      if state == "running" then
        return inst
      elseif state == "terminated" or state == "shutting-down" then
        local reason = inst.stateReason and inst.stateReason.message or inst.reason or "no reason given"
        fail(self, ("instance %s is %s (%s)"):format(id, state, tostring(reason)))
      elseif state == "stopped" or state == "stopping" then
        fail(self, ("instance %s is %s, not starting: start it or delete the node"):format(id, state))
      end
      pause(self, interval, ("instance %s is still %s"):format(id, tostring(state)))
    end
  end
end

local HOST_KEY_TYPES = {
  ["ssh-ed25519"] = "ed25519", ["ssh-rsa"] = "rsa",
  ["ecdsa-sha2-nistp256"] = "ecdsa", ["ecdsa-sha2-nistp384"] = "ecdsa", ["ecdsa-sha2-nistp521"] = "ecdsa",
}

-- console_keys reads the host keys cloud-init prints to the console
-- between -----BEGIN SSH HOST KEY KEYS----- and -----END ...-----, as
-- Coopr's ssh_host_keys ({ed25519 =, ecdsa =, rsa =} base64 blobs).
local function console_keys(output)
  local block = output:match("%-%-%-%-%-BEGIN SSH HOST KEY KEYS%-%-%-%-%-(.-)%-%-%-%-%-END SSH HOST KEY KEYS%-%-%-%-%-")
  if not block then return nil end
  local keys, n = {}, 0
  for line in block:gmatch("[^\r\n]+") do
    local typ, blob = line:match("(%S+)%s+(AAAA[%w%+/=]+)")
    if typ and HOST_KEY_TYPES[typ] and not keys[HOST_KEY_TYPES[typ]] then
      keys[HOST_KEY_TYPES[typ]] = blob
      n = n + 1
    end
  end
  if n == 0 then return nil end
  return keys
end

-- host_keys_from_console polls GetConsoleOutput for cloud-init's host
-- keys, up to host_key_wait seconds. The console is EC2's own channel from
-- the machine, so keys read there are trusted, unlike a first keyscan.
local function host_keys_from_console(self, c, id, f, interval)
  local budget = number(f.host_key_wait, 240)
  if budget <= 0 then return nil end
  local started = ec2.now()
  while true do
    local ok, doc = try_call(c, "GetConsoleOutput", { InstanceId = id })
    if not ok then
      log.warn("could not read the console output of %s: %s", id, tostring(type(doc) == "table" and doc.message or doc))
      return nil
    end
    local out = doc.output
    if type(out) == "string" and out ~= "" then
      local dok, text = pcall(crypto.base64_decode, out)
      local keys = dok and console_keys(text)
      if keys then return keys end
    end
    if ec2.now() - started + interval > budget or interval > ec2.remaining() or not time then
      log.warn("no SSH host keys in the console output of %s within %ds (the AMI's cloud-init may not print them)", id, math.floor(budget))
      return nil
    end
    time.sleep(interval)
  end
end

-- scan waits for sshd on host:port (loom.ssh's wait_host_keys: a keyscan
-- every interval, within ssh_wait and the hook's deadline) and returns its
-- keys, or nil and why.
local function scan(self, host, f, interval)
  local have_ssh, ssh = pcall(require, "loom.ssh")
  if not have_ssh then return nil, "loom.ssh is not available" end
  return ssh.wait_host_keys({ host = host, port = number(f.ssh_port, 22), timeout = math.max(number(f.ssh_wait, 300), 0),
    interval = interval })
end

function AWS:confirm(input)
  local f = input.fields
  local id = instance_id(self, input.providerid)
  local c = client(self, f)
  local interval = number(f.poll_interval, 5)
  if interval <= 0 then interval = 5 end

  local inst = wait_running(self, c, id, interval)
  local public, private = inst.ipAddress, inst.privateIpAddress
  if public == "" then public = nil end
  if private == "" then private = nil end
  local access = public or private
  if access == nil then
    fail(self, ("instance %s runs but has no IP address"):format(id))
  end
  local hostname = self.task.config.hostname
  if truthy(f.provider_hostname, false) and inst.dnsName and inst.dnsName ~= "" then
    hostname = inst.dnsName
  end
  self.result.ipaddresses = { access_v4 = access, bind_v4 = private or public }
  self.result.hostname = hostname
  log.info("instance %s runs at %s (private %s)", id, tostring(public), tostring(private))

  local keys = host_keys_from_console(self, c, id, f, interval)
  if keys then
    self.result.result.ssh_host_keys = keys
    log.info("recorded the SSH host keys of %s from its console output", id)
  end
  if truthy(f.wait_for_ssh, true) then
    local scanned, why = scan(self, access, f, interval)
    if scanned == nil then
      if keys then
        fail(self, why)
      end
      log.warn("%s: CONFIRM succeeds without ssh_host_keys", tostring(why))
    elseif keys then
      -- sshd must present a key the console printed: anything else is
      -- another machine (or a man in the middle) on that address.
      local match = false
      for typ, blob in pairs(scanned) do
        match = match or keys[typ] == blob
      end
      if not match then
        fail(self, ("sshd on %s presents host keys that the console output of %s does not list: refusing it (is the address another machine's?)")
          :format(access, id))
      end
    else
      self.result.result.ssh_host_keys = scanned
      log.warn("recorded the SSH host keys sshd on %s presents (the console had none): trusted on first use", access)
    end
  end
  self.result.status = 0
end

-- DELETE -----------------------------------------------------------------

local function terminate(self, c, ids)
  local ok, err = try_call(c, "TerminateInstances", ec2.add_list({}, "InstanceId", ids))
  if not ok then
    if type(err) == "table" and err.code == "InvalidInstanceID.NotFound" then
      log.info("instance %s was already gone", table.concat(ids, ", "))
      return
    end
    fail(self, err)
  end
  log.info("terminating %s", table.concat(ids, ", "))
end

-- forget_key deletes the node's generated key pair and key file.
local function forget_key(self, c, node)
  local name = generated_key_name(node)
  local ok, err = try_call(c, "DeleteKeyPair", { KeyName = name })
  if not ok then
    log.warn("could not delete key pair %s: %s", name, tostring(type(err) == "table" and err.message or err))
    return
  end
  if fs.remove("ssh_keys/" .. name) then
    log.info("deleted key pair %s and its key file", name)
  end
end

function AWS:delete(input)
  local f = input.fields
  local c = client(self, f)
  local node = node_id(self.task)
  local providerid = input.providerid
  if providerid == nil or providerid == "" then
    -- CREATE may have launched an instance and died before reporting it:
    -- the node tag still finds it.
    local ids = {}
    for _, inst in ipairs(find_live(self, c, node, false)) do ids[#ids + 1] = inst.instanceId end
    if #ids > 0 then
      log.info("no providerid: terminating the instances tagged coopr-node=%s", node)
      terminate(self, c, ids)
    else
      log.info("no providerid and no instance tagged coopr-node=%s: nothing to delete", node)
    end
  else
    local id = instance_id(self, providerid)
    local inst = describe(self, c, id)
    if inst == nil then
      log.info("instance %s was already gone", id)
    else
      local owner = ec2.tag(inst, "coopr-node")
      if owner ~= nil and owner ~= node then
        fail(self, ("instance %s belongs to node %s, not %s: refusing to terminate it (is the providerid stale?)"):format(id, owner, node))
      end
      local state = inst.instanceState and inst.instanceState.name
      if state == "terminated" then
        log.info("instance %s was already terminated", id)
      else
        terminate(self, c, { id })
      end
    end
  end
  if f.ssh_keypair == nil or f.ssh_keypair == "" then
    forget_key(self, c, node)
  end
  self.result.status = 0
end
