-- Argo CD health check of bench.spx.dev/ShardedProjectionExperiment that GATES a rollout on the verdict.
-- Install: argocd-cm data key `resource.customizations.health.bench.spx.dev_ShardedProjectionExperiment`
-- (docs/gating.md "GitOps health checks"). Tested by tests/chart/test_gitops_health.py with a real Lua.
-- gitops-engine (pkg/sync/sync_context.go) fails a sync on Degraded, keeps it running on Progressing
-- and Suspended, and lets the next wave go on Healthy; so:
--   no status yet / status of an older generation / Decided False -> Progressing (measuring)
--   Decided False, reason Queued                                -> Suspended (waiting for a slot)
--   Decided True, reason Pass                                   -> Healthy (the rollout may go)
--   Decided True, reason Inconclusive                           -> Suspended (held: a human decides)
--   Decided True, any other reason (Fail, or no verdict: InvalidSpec | BenchmarkFailed | InfraFailed | a
--   reason a later operator adds)                               -> Degraded (stops: fails closed)
-- "The measurement finished, whatever its verdict" is argocd-health-finished.lua, a separate check.
local hs = {}
local generation = 0
if obj.metadata ~= nil and obj.metadata.generation ~= nil then
  generation = obj.metadata.generation
end
if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the spx operator's first status write"
  return hs
end
if obj.status.observedGeneration ~= nil and obj.status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the spx operator to observe generation " .. tostring(generation)
  return hs
end
local decided = nil
for _, condition in ipairs(obj.status.conditions) do
  if condition.type == "Decided" then
    decided = condition
  end
end
if decided == nil or (decided.observedGeneration ~= nil and decided.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the spx operator to decide generation " .. tostring(generation)
  return hs
end
local message = decided.message or ""
if decided.status == "True" then
  if decided.reason == "Pass" then
    hs.status = "Healthy"
  elseif decided.reason == "Inconclusive" then
    hs.status = "Suspended"
    message = "held for a human (docs/gating.md): " .. message
  else
    hs.status = "Degraded"
  end
  hs.message = decided.reason .. ": " .. message
  return hs
end
if decided.reason == "Queued" then
  hs.status = "Suspended"
else
  hs.status = "Progressing"
end
hs.message = (decided.reason or "Pending") .. ": " .. message
return hs
