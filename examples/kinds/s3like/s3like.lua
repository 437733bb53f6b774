-- s3like: an ObjectBucketClaim provisioner for an S3-compatible store with
-- an admin API (buckets, users with access keys, per-bucket grants).
--
-- The StorageClass parameters name the store: adminUrl (the admin API),
-- host, port and region (what applications connect to). The admin token
-- is the operator's, not the claim's: it is read from the file admin-token
-- in the type's work dir (<work>/<tenant>/bucketprovisioners/s3like/), as a
-- controller reads a mounted Secret.
-- Provision and grant run on every reconcile: both are idempotent.
-- Delete and revoke get the ObjectBucket read back from Kubernetes, which
-- has no credentials: everything they need is in additional_state.
-- A claim's spec.additionalConfig (maxSize, versioning ...) is the bucket's
-- config: provision applies it (the library's current generation calls it
-- on every reconcile), and update applies a changed one (generation 2
-- calls update instead).
--
-- The library has no terminal errors: every error is retried with backoff
-- (up to 1000 s apart), so each message says what to fix.
local loom = require("loom")
local http = require("loom.http")
local fs = require("loom.fs")

local S3Like = loom.BucketProvisioner:extend("S3Like")

local function token(self)
  if not fs.exists("admin-token") then
    error({ class = "retry", message = "no admin token: write it to " .. self.env.work_dir .. "/admin-token" })
  end
  return (fs.read("admin-token"):gsub("%s+$", ""))
end

local function admin(self, p, method, path, body)
  local resp = http.request(method, p.adminUrl .. path, { bearer = token(self), json = body, retries = 2 })
  if resp.status == 409 then
    error({ bucket_exists = true, message = (resp:json() or {}).error or "bucket exists" })
  end
  if not resp.ok and resp.status ~= 404 then
    error(("%s %s: %d %s"):format(method, path, resp.status, resp.body))
  end
  return resp:json(), resp.status
end

local function params(req)
  local p = req.parameters or {}
  if (p.adminUrl or "") == "" then
    error({ class = "retry", message = "StorageClass parameter adminUrl is missing (the store's admin API)" })
  end
  return p
end

-- configure applies a claim's additionalConfig to the bucket; it returns
-- the config applied (the ObjectBucket's endpoint.additional_config).
local function configure(self, p, bucket, config)
  if config == nil or next(config) == nil then return nil end
  admin(self, p, "PUT", "/buckets/" .. bucket .. "/config", config)
  return config
end

-- connection grants user on bucket and returns what the library needs.
local function connection(self, req, p, user)
  local keys = admin(self, p, "POST", "/users", { id = user })
  admin(self, p, "PUT", "/users/" .. user .. "/grants/" .. req.bucket_name)
  return {
    endpoint = { bucket_host = p.host or "127.0.0.1", bucket_port = tonumber(p.port or "9000"),
                 bucket_name = req.bucket_name, region = p.region or "" },
    access_keys = { access_key_id = keys.accessKey, secret_access_key = keys.secretKey },
    additional_state = { user = user, adminUrl = p.adminUrl },
  }
end

function S3Like:generate_user_id(req)
  return "obc-" .. req.claim.metadata.namespace .. "-" .. req.claim.metadata.name
end

function S3Like:provision(req)
  local p = params(req)
  local user = req.user_id or self:generate_user_id(req)
  -- 409 from another owner is bucket_exists; our own bucket is a 200.
  admin(self, p, "PUT", "/buckets/" .. req.bucket_name, { owner = user, region = p.region })
  local c = connection(self, req, p, user)
  c.endpoint.additional_config = configure(self, p, req.bucket_name, req.claim.spec and req.claim.spec.additionalConfig)
  return c
end

function S3Like:grant(req)
  local p = params(req)
  local _, status = admin(self, p, "GET", "/buckets/" .. req.bucket_name)
  if status == 404 then
    return nil, "bucket " .. req.bucket_name .. " named by the StorageClass does not exist"
  end
  return connection(self, req, p, req.user_id or self:generate_user_id(req))
end

local function state(req)
  local st = req.object_bucket.spec and req.object_bucket.spec.additionalState or {}
  if not st.user or not st.adminUrl then
    -- A retry, as every error of this contract: the library keeps the
    -- claim on its finalizer until the ObjectBucket is fixed or removed.
    error(("ObjectBucket %s has no additionalState.user/adminUrl: it was not provisioned by s3like "
      .. "(does its StorageClass name another provisioner?); add them, or remove the ObjectBucket's finalizer"):format(
      req.object_bucket.metadata and req.object_bucket.metadata.name or "?"))
  end
  return st, req.object_bucket.spec.endpoint.bucketName
end

function S3Like:revoke(req)
  local st, bucket = state(req)
  local p = { adminUrl = st.adminUrl }
  admin(self, p, "DELETE", "/users/" .. st.user .. "/grants/" .. bucket) -- 404: already revoked
end

-- Generation 2 of the library: the claim's additionalConfig changed; the
-- ObjectBucket carries the new one (or the previous one, when the library
-- reverts after failing to store the ObjectBucket).
function S3Like:update(req)
  local st, bucket = state(req)
  local config = req.object_bucket.spec.endpoint.additionalConfig or {}
  local _, status = admin(self, { adminUrl = st.adminUrl }, "PUT", "/buckets/" .. bucket .. "/config", config)
  if status == 404 then
    return nil, "bucket " .. bucket .. " does not exist (deleted outside Kubernetes?): its config cannot change"
  end
end

function S3Like:delete(req)
  local st, bucket = state(req)
  local p = { adminUrl = st.adminUrl }
  admin(self, p, "DELETE", "/buckets/" .. bucket)
  admin(self, p, "DELETE", "/users/" .. st.user)
end

return S3Like
