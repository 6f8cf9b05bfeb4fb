{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "spx-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Fully qualified app name: the release name, unless it already contains the chart name. */}}
{{- define "spx-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "spx-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels: stable across upgrades. */}}
{{- define "spx-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spx-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "spx-operator.labels" -}}
helm.sh/chart: {{ include "spx-operator.chart" . }}
{{ include "spx-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: spx
{{- end }}

{{- define "spx-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "spx-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image reference: a digest wins over a tag; the tag defaults to appVersion. */}}
{{- define "spx-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- if .Values.policy.requireImageDigest }}
{{- fail "policy.requireImageDigest is true but image.digest is empty: pin the operator image too; set image.digest to sha256:<64 hex digits> (scripts/release.sh prints it)" }}
{{- end }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The default bench image for experiments without spec.image. */}}
{{- define "spx-operator.benchImage" -}}
{{- if .Values.bench.image.digest }}
{{- printf "%s@%s" .Values.bench.image.repository .Values.bench.image.digest }}
{{- else }}
{{- if .Values.policy.requireImageDigest }}
{{- fail "policy.requireImageDigest is true but bench.image.digest is empty: the default bench image (the pod that gets the GPUs) must be pinned too; set bench.image.digest to sha256:<64 hex digits> (scripts/release.sh prints it)" }}
{{- end }}
{{- printf "%s:%s" .Values.bench.image.repository (default .Chart.AppVersion .Values.bench.image.tag) }}
{{- end }}
{{- end }}

{{/* Namespaces the operator watches, as a JSON list: watch.namespaces, else the release namespace;
[] with watch.allNamespaces (every namespace). Use: include ... | fromJsonArray. */}}
{{- define "spx-operator.watchNamespaces" -}}
{{- if .Values.watch.allNamespaces }}
{{- list | toJson }}
{{- else if .Values.watch.namespaces }}
{{- .Values.watch.namespaces | toJson }}
{{- else }}
{{- list .Release.Namespace | toJson }}
{{- end }}
{{- end }}

{{/* The policy as the operator reads it (SPX_POLICY, spx.api.policy.Policy, camelCase JSON). */}}
{{- define "spx-operator.policyJson" -}}
{{- $p := .Values.policy }}
{{- $p | toJson }}
{{- end }}

{{/* host:port of a listen address, IPv6 addresses in brackets: (list ADDRESS PORT). */}}
{{- define "spx-operator.hostPort" -}}
{{- $addr := index . 0 }}{{- $port := index . 1 }}
{{- if contains ":" $addr }}[{{ $addr }}]:{{ $port }}{{ else }}{{ $addr }}:{{ $port }}{{ end }}
{{- end }}

{{/* CEL: whether string expression X matches an allowlist of spx.api.policy patterns ("*" anything,
"NCCL_*" a prefix, else exact): (list PATTERNS X). */}}
{{- define "spx-operator.celMatch" -}}
{{- $pats := index . 0 }}{{- $x := index . 1 }}
{{- $exact := list }}{{- $pre := list }}
{{- range $pats }}{{- if hasSuffix "*" . }}{{- $pre = append $pre (trimSuffix "*" .) }}{{- else }}{{- $exact = append $exact . }}{{- end }}{{- end }}
{{- printf "(%s.exists(p, p == %s) || %s.exists(p, %s.startsWith(p)))" (toJson $exact) $x (toJson $pre) $x }}
{{- end }}

{{/* Fail with a clear message when an optional object needs a CRD that the cluster does not serve:
(list . "monitoring.coreos.com/v1/ServiceMonitor" "serviceMonitor.enabled"). Only against a live
cluster (`helm install/upgrade`: the kube-system namespace can be looked up); offline renders
(`helm template`, `--dry-run=client`) know no cluster's APIs and are not checked. */}}
{{- define "spx-operator.requireApi" -}}
{{- $ctx := index . 0 }}{{- $api := index . 1 }}{{- $value := index . 2 }}
{{- $live := lookup "v1" "Namespace" "" "kube-system" }}
{{- if and $live (not ($ctx.Capabilities.APIVersions.Has $api)) }}
{{- fail (printf "%s is true but this cluster does not serve %s (prometheus-operator's CRDs are not installed): install them (e.g. kube-prometheus-stack) or set %s=false" $value $api $value) }}
{{- end }}
{{- end }}

{{/*
A values section with defaults under it, as JSON: (list PARENT KEY DEFAULTS) → PARENT.KEY merged over
DEFAULTS (the section's keys win; a missing section or key takes the default). Every value a chart
version adds is read through this (or `dig`), so `helm upgrade --reuse-values` from an older chart —
whose stored values tree lacks the key — renders instead of stopping on a nil pointer (issue #36;
tests/chart/test_chart_upgrade.py renders this chart with every earlier values.yaml).
*/}}
{{- define "spx-operator.valuesOr" -}}
{{- $parent := index . 0 | default dict }}
{{- $value := index $parent (index . 1) }}
{{- $defaults := index . 2 }}
{{- if kindIs "map" $defaults }}
{{- mergeOverwrite (deepCopy $defaults) (default dict $value) | toJson }}
{{- else }}
{{- (hasKey $parent (index . 1) | ternary $value $defaults) | toJson }}
{{- end }}
{{- end }}
