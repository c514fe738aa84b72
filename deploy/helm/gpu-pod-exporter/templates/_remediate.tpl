{{/* Helpers for the remediator (remediate-*.yaml); see docs/remediation.md. ----------------------- */}}

{{- define "gpu-pod-exporter.remediate.name" -}}
{{- printf "%s-remediate" (include "gpu-pod-exporter.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Its own selector labels: the exporter's DaemonSet and Service select name+instance, and must not
     pick up the remediator's pod. */}}
{{- define "gpu-pod-exporter.remediate.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-remediate" (include "gpu-pod-exporter.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-pod-exporter.remediate.labels" -}}
helm.sh/chart: {{ include "gpu-pod-exporter.chart" . }}
{{ include "gpu-pod-exporter.remediate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: remediate
app.kubernetes.io/part-of: gpu-pod-exporter
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gpu-pod-exporter.remediate.tokenSecret" -}}
{{- default (printf "%s-webhook" (include "gpu-pod-exporter.remediate.name" .)) .Values.remediation.webhook.existingSecret -}}
{{- end -}}

{{- define "gpu-pod-exporter.remediate.tokenKey" -}}
{{- if .Values.remediation.webhook.existingSecret -}}
{{- .Values.remediation.webhook.existingSecretKey -}}
{{- else -}}
token
{{- end -}}
{{- end -}}

{{/* "true" when Alertmanager must send a bearer token. */}}
{{- define "gpu-pod-exporter.remediate.tokenUsed" -}}
{{- if or .Values.remediation.webhook.existingSecret .Values.remediation.webhook.token -}}
true
{{- end -}}
{{- end -}}

{{/* The allowlist as the regular expression of the AlertmanagerConfig matcher (Alertmanager anchors it). */}}
{{- define "gpu-pod-exporter.remediate.alertRegex" -}}
{{- keys .Values.remediation.alerts | sortAlpha | join "|" -}}
{{- end -}}

{{- define "gpu-pod-exporter.remediate.alertmanagerConfigEnabled" -}}
{{- $amc := .Values.remediation.alertmanagerConfig -}}
{{- if and .Values.remediation.enabled $amc.enabled (or $amc.force (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1alpha1/AlertmanagerConfig")) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.remediate.serviceMonitorEnabled" -}}
{{- $sm := .Values.remediation.serviceMonitor -}}
{{- if and .Values.remediation.enabled $sm.enabled (or $sm.force (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) -}}
true
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.remediate.prometheusRuleEnabled" -}}
{{- $pr := .Values.remediation.prometheusRule -}}
{{- if and .Values.remediation.enabled $pr.enabled (or $pr.force (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PrometheusRule")) -}}
true
{{- end -}}
{{- end -}}

{{/* The policy file the remediator reads (exporter/remediate/policy.py), from the values. */}}
{{- define "gpu-pod-exporter.remediate.policy" -}}
{{- $r := .Values.remediation -}}
{{- $alerts := dict -}}
{{- range $name, $alert := $r.alerts -}}
{{- $_ := set $alerts $name (dict "actions" $alert.actions "taint_effect" $alert.taintEffect "untaint_after" $alert.untaintAfter) -}}
{{- end -}}
{{- $limits := dict "cooldown" $r.limits.cooldown "max_nodes_per_hour" ($r.limits.maxNodesPerHour | int64) "max_tainted_percent" $r.limits.maxTaintedPercent "gpu_resources" $r.limits.gpuResources -}}
{{- $policy := dict "mode" $r.mode "node_label" $r.nodeLabel "alerts" $alerts "limits" $limits -}}
{{- if $r.cluster }}{{ $_ := set $policy "cluster" $r.cluster }}{{ end -}}
{{- if $r.drain.enabled -}}
{{- $_ := set $policy "drain" (dict "mode" $r.drain.mode "deadline" $r.drain.deadline "namespaces" $r.drain.namespaces "pod_label" $r.drain.podLabel "unmanaged_pods" $r.drain.unmanagedPods) -}}
{{- end -}}
{{- if $r.repairRequest.enabled }}{{ $_ := set $policy "repair_request" true }}{{ end -}}
{{- if $r.deviceTaints.enabled }}{{ $_ := set $policy "device_taints" true }}{{ end -}}
{{- if $r.validation.image -}}
{{- $validation := dict "image" $r.validation.image "namespace" (include "gpu-pod-exporter.remediate.validationNamespace" .) -}}
{{- if $r.validation.command }}{{ $_ := set $validation "command" $r.validation.command }}{{ end -}}
{{- $_ := set $policy "validation" $validation -}}
{{- end -}}
{{- toYaml $policy -}}
{{- end -}}

{{- define "gpu-pod-exporter.remediate.validationNamespace" -}}
{{- .Values.remediation.validation.namespace | default (include "gpu-pod-exporter.namespace" .) -}}
{{- end -}}
