-- Argo CD health check of bench.spx.dev/ShardedProjectionExperiment, keyed on the Decided condition.
-- Install: argocd-cm data key `resource.customizations.health.bench.spx.dev_ShardedProjectionExperiment`
-- (docs/operator.md "GitOps health"). Tested by tests/chart/test_gitops_health.py with a real Lua.
--   no status yet / status of an older generation  -> Progressing (the operator has not looked yet)
--   Decided True, reason Pass | Fail | Inconclusive -> Healthy (a finished measurement; the verdict is in the message)
--   Decided True, reason InvalidSpec | BenchmarkFailed | InfraFailed -> Degraded (no verdict; needs a spec change)
--   Decided False (Pending, Queued, Running, Analyzing) -> Progressing; Queued -> Suspended
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
