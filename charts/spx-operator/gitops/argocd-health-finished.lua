-- Argo CD health check of bench.spx.dev/ShardedProjectionExperiment: "the measurement finished", whatever
-- its verdict. NOT a gate: a Fail is Healthy here. Use it for an Application that only runs experiments
-- (a dashboard of finished runs); to gate a rollout use argocd-health.lua. Install under the same argocd-cm
-- key `resource.customizations.health.bench.spx.dev_ShardedProjectionExperiment` (one check per kind and
-- Argo CD instance). Tested by tests/chart/test_gitops_health.py with a real Lua.
--   no status yet / older generation / Decided False -> Progressing (Queued -> Suspended)
--   Decided True, reason Pass | Fail | Inconclusive  -> Healthy (the verdict is in the message)
--   Decided True, any other reason (no verdict: InvalidSpec | BenchmarkFailed | InfraFailed | a later
--   operator's new reason)                            -> Degraded (fails closed)
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
  if decided.reason == "Pass" or decided.reason == "Fail" or decided.reason == "Inconclusive" then
    hs.status = "Healthy"
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
