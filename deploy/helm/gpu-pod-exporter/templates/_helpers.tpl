{{/* Names ------------------------------------------------------------------------------------ */}}

{{- define "gpu-pod-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-pod-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride -}}
{{- end -}}

{{- define "gpu-pod-exporter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-pod-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gpu-pod-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* A name derived from a file name: <fullname>-<suffix>-<base>, DNS-1123, at most 63 characters. */}}
{{- define "gpu-pod-exporter.fileObjectName" -}}
{{- $base := .path | base | trimSuffix (ext .path) | lower -}}
{{- $base = regexReplaceAll "[^a-z0-9-]+" $base "-" | trimAll "-" -}}
{{- printf "%s-%s-%s" (include "gpu-pod-exporter.fullname" .root) .suffix $base | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels ----------------------------------------------------------------------------------- */}}

{{- define "gpu-pod-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-pod-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-pod-exporter.labels" -}}
helm.sh/chart: {{ include "gpu-pod-exporter.chart" . }}
{{ include "gpu-pod-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: gpu-pod-exporter
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Image ------------------------------------------------------------------------------------ */}}

{{- define "gpu-pod-exporter.image" -}}
{{- $registry := .Values.image.registry -}}
{{- $repository := .Values.image.repository -}}
{{- $tag := .Values.image.tag -}}
{{- if include "gpu-pod-exporter.upstreamImage" . -}}
{{- /* A values file written for dcgm-exporter's chart still names its image (and tag): run ours. */ -}}
{{- $registry = include "gpu-pod-exporter.defaultRegistry" . -}}
{{- $repository = include "gpu-pod-exporter.defaultRepository" . -}}
{{- $tag = "" -}}
{{- end -}}
{{- with (.Values.global | default dict).imageRegistry -}}
{{- $registry = . -}}
{{- end -}}
{{- /* A repository that starts with a registry host (dcgm-exporter's chart takes complete names) gets no prefix. */ -}}
{{- $first := splitList "/" $repository | first -}}
{{- if and $registry (not (and (gt (len (splitList "/" $repository)) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")))) -}}
{{- $repository = printf "%s/%s" $registry $repository -}}
{{- end -}}
{{- /* dcgm-exporter's image.digest pins dcgm-exporter's image: with its image replaced, the digest goes too. */ -}}
{{- if and .Values.image.digest (not (include "gpu-pod-exporter.upstreamImage" .)) -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion $tag) -}}
{{- end -}}
{{- end -}}

{{/* Prometheus Operator CRDs: rendered when the API is served, or when forced. ----------------- */}}

{{- define "gpu-pod-exporter.serviceMonitorEnabled" -}}
{{- $api := printf "%s/ServiceMonitor" (default "monitoring.coreos.com/v1" .Values.serviceMonitor.apiVersion) -}}
{{- if and .Values.serviceMonitor.enabled (or .Values.serviceMonitor.force (.Capabilities.APIVersions.Has $api)) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.prometheusRuleEnabled" -}}
{{- if and .Values.prometheusRule.enabled (or .Values.prometheusRule.force (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule")) -}}
true
{{- end -}}
{{- end -}}

{{/* Web security ----------------------------------------------------------------------------- */}}

{{/* "true" when the chart generates the web config Secret (TLS, users or headers configured). */}}
{{- define "gpu-pod-exporter.webConfigGenerated" -}}
{{- if and (not .Values.web.existingConfigSecret) (or .Values.web.tls.enabled .Values.web.basicAuth.users .Values.web.basicAuth.passwords .Values.web.headers) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.webConfigSecretName" -}}
{{- default (printf "%s-web-config" (include "gpu-pod-exporter.fullname" .)) .Values.web.existingConfigSecret -}}
{{- end -}}

{{- define "gpu-pod-exporter.webConfigUsed" -}}
{{- if or .Values.web.existingConfigSecret (include "gpu-pod-exporter.webConfigGenerated" .) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.basicAuthOn" -}}
{{- if or .Values.web.basicAuth.users .Values.web.basicAuth.passwords -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.clientCertRequired" -}}
{{- if has .Values.web.tls.clientAuthType (list "RequireAnyClientCert" "RequireAndVerifyClientCert") -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.clientCAUsed" -}}
{{- if and .Values.web.tls.enabled (has .Values.web.tls.clientAuthType (list "VerifyClientCertIfGiven" "RequireAndVerifyClientCert")) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.clientCASecret" -}}
{{- default .Values.web.tls.existingSecret .Values.web.tls.clientCASecret -}}
{{- end -}}

{{/* The scheme Prometheus and the probes use. */}}
{{- define "gpu-pod-exporter.scheme" -}}
{{- if or .Values.web.tls.enabled (eq .Values.web.probeMode "https") -}}
https
{{- else -}}
http
{{- end -}}
{{- end -}}

{{/* Probe mode after resolving "auto": http, https or tcp. */}}
{{- define "gpu-pod-exporter.probeMode" -}}
{{- if ne .Values.web.probeMode "auto" -}}
{{- .Values.web.probeMode -}}
{{- else if and (not .Values.web.existingConfigSecret) (or (include "gpu-pod-exporter.basicAuthOn" .) (and .Values.web.tls.enabled (include "gpu-pod-exporter.clientCertRequired" .))) -}}
tcp
{{- else if .Values.web.tls.enabled -}}
https
{{- else -}}
http
{{- end -}}
{{- end -}}

{{/* One probe: dict "probe" <values> "mode" <http|https|tcp> "port" <name>. */}}
{{- define "gpu-pod-exporter.probe" -}}
{{- if eq .mode "tcp" -}}
tcpSocket:
  port: {{ .port }}
{{- else -}}
httpGet:
  path: {{ .probe.path }}
  port: {{ .port }}
  scheme: {{ upper .mode }}
{{- end }}
{{- with .probe.initialDelaySeconds }}
initialDelaySeconds: {{ . | int64 }}
{{- end }}
periodSeconds: {{ .probe.periodSeconds | int64 }}
timeoutSeconds: {{ .probe.timeoutSeconds | int64 }}
failureThreshold: {{ .probe.failureThreshold | int64 }}
{{- with .probe.successThreshold }}
successThreshold: {{ . | int64 }}
{{- end }}
{{- end -}}

{{/* Security context ------------------------------------------------------------------------- */}}

{{- define "gpu-pod-exporter.runsAsRoot" -}}
{{- if or (eq .Values.runAs "root") (and (eq .Values.runAs "auto") .Values.kubernetes.enabled) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.podSecurityContext" -}}
{{- $identity := dict "runAsUser" 0 "runAsGroup" 0 "runAsNonRoot" false -}}
{{- if not (include "gpu-pod-exporter.runsAsRoot" .) -}}
{{- $uid := .Values.nonRootUID | int64 -}}
{{- $identity = dict "runAsUser" $uid "runAsGroup" $uid "runAsNonRoot" true -}}
{{- end -}}
{{- toYaml (mergeOverwrite $identity (deepCopy .Values.podSecurityContext)) -}}
{{- end -}}

{{/* The counters CSV text the chart ships in its ConfigMap. */}}
{{- define "gpu-pod-exporter.countersCSV" -}}
{{- if .Values.counters.custom -}}
{{- .Values.counters.custom -}}
{{- else -}}
{{- $csv := .Files.Get "files/default-counters.csv" -}}
{{- if not $csv -}}
{{- fail "files/default-counters.csv is missing from the chart: run scripts/sync-chart-files.py" -}}
{{- end -}}
{{- $csv -}}
{{- end -}}
{{- end -}}

{{/* Comma-joined list value for an environment variable. */}}
{{- define "gpu-pod-exporter.csvList" -}}
{{- join "," . -}}
{{- end -}}

{{/*
The GPU node affinity's nodeSelectorTerms: one term per gpuNodeAffinity.labels entry (a node with
any of them qualifies), or the single gpuNodeAffinity.key when it is set.
*/}}
{{- define "gpu-pod-exporter.gpuNodeSelectorTerms" -}}
{{- if .Values.gpuNodeAffinity.key }}
- matchExpressions:
    - key: {{ .Values.gpuNodeAffinity.key | quote }}
      operator: In
      values:
        {{- toYaml .Values.gpuNodeAffinity.values | nindent 8 }}
{{- else }}
{{- range .Values.gpuNodeAffinity.labels }}
- matchExpressions:
    - key: {{ .key | quote }}
      operator: {{ .operator | default "In" }}
      {{- if and .values (has (.operator | default "In") (list "In" "NotIn")) }}
      values:
        {{- toYaml .values | nindent 8 }}
      {{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
How many of the cluster's nodes the GPU node affinity selects, or "" when the chart cannot see the
nodes (helm template, or no right to list them): NOTES.txt warns when a cluster has nodes and none
qualifies, since the DaemonSet then schedules nothing and says nothing.
*/}}
{{- define "gpu-pod-exporter.gpuNodesMatched" -}}
{{- $nodes := (lookup "v1" "Node" "" "").items | default list -}}
{{- if $nodes -}}
{{- $terms := list -}}
{{- if .Values.gpuNodeAffinity.key -}}
{{- $terms = list (dict "key" .Values.gpuNodeAffinity.key "operator" "In" "values" .Values.gpuNodeAffinity.values) -}}
{{- else -}}
{{- $terms = .Values.gpuNodeAffinity.labels -}}
{{- end -}}
{{- $matched := 0 -}}
{{- range $node := $nodes -}}
{{- $labels := $node.metadata.labels | default dict -}}
{{- $hit := false -}}
{{- range $term := $terms -}}
{{- $op := $term.operator | default "In" -}}
{{- $has := hasKey $labels $term.key -}}
{{- $value := get $labels $term.key -}}
{{- if or (and (eq $op "Exists") $has) (and (eq $op "DoesNotExist") (not $has)) (and (eq $op "In") $has (has $value ($term.values | default list))) (and (eq $op "NotIn") (or (not $has) (not (has $value ($term.values | default list))))) -}}
{{- $hit = true -}}
{{- end -}}
{{- end -}}
{{- if $hit -}}{{- $matched = add1 $matched -}}{{- end -}}
{{- end -}}
{{- $matched -}}
{{- end -}}
{{- end }}
