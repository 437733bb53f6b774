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
  return connection(self, req, p, user)
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
    error({ class = "terminal", message = "the ObjectBucket has no additionalState.user/adminUrl: it was not provisioned by s3like" })
  end
  return st, req.object_bucket.spec.endpoint.bucketName
end

function S3Like:revoke(req)
  local st, bucket = state(req)
  local p = { adminUrl = st.adminUrl }
  admin(self, p, "DELETE", "/users/" .. st.user .. "/grants/" .. bucket) -- 404: already revoked
end

function S3Like:delete(req)
  local st, bucket = state(req)
  local p = { adminUrl = st.adminUrl }
  admin(self, p, "DELETE", "/buckets/" .. bucket)
  admin(self, p, "DELETE", "/users/" .. st.user)
end

return S3Like
