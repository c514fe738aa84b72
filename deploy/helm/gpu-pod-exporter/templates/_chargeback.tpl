{{/* Helpers for the chargeback CronJob (chargeback-*.yaml); see docs/cost.md. ------------------------ */}}

{{- define "gpu-pod-exporter.chargeback.name" -}}
{{- printf "%s-chargeback" (include "gpu-pod-exporter.fullname" .) | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-pod-exporter.chargeback.labels" -}}
helm.sh/chart: {{ include "gpu-pod-exporter.chart" . }}
app.kubernetes.io/name: {{ printf "%s-chargeback" (include "gpu-pod-exporter.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: chargeback
app.kubernetes.io/part-of: gpu-pod-exporter
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gpu-pod-exporter.chargeback.claim" -}}
{{- default (include "gpu-pod-exporter.chargeback.name" .) .Values.chargeback.storage.existingClaim -}}
{{- end -}}
