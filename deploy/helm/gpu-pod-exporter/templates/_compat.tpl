{{/*
dcgm-exporter chart compatibility: a values file written for NVIDIA's dcgm-exporter chart (4.8)
renders here unchanged. Each of its keys is mapped onto this chart's own key, once per render,
before anything reads the values; every template starts with
  {{- include "gpu-pod-exporter.upstreamCompat" . -}}
(it writes nothing and is idempotent). NOTES.txt lists each dcgm-exporter key it found and what it
became ("gpu-pod-exporter.upstreamNotes"); docs/migrate-from-dcgm-exporter.md has the full table.

Why mapping in place instead of reading both keys everywhere: every template, helper and the
NOTES then see one set of values, so a dcgm-exporter key can never be honoured in one object and
ignored in another.
*/}}

{{/* The chart's own image, for a values file that still names dcgm-exporter's. */}}
{{- define "gpu-pod-exporter.defaultRegistry" -}}ghcr.io{{- end -}}
{{- define "gpu-pod-exporter.defaultRepository" -}}gpu-pod-exporter/gpu-pod-exporter{{- end -}}

{{/* "true" when image.repository is dcgm-exporter's image (nvcr.io/nvidia/k8s/dcgm-exporter or a mirror of it). */}}
{{- define "gpu-pod-exporter.upstreamImage" -}}
{{- if regexMatch "(^|/)nvidia/k8s/dcgm-exporter$" (toString .Values.image.repository) -}}true{{- end -}}
{{- end -}}

{{/* The newest dcgm-exporter release whose flags, values and files this chart and image take (the corpus,
     upstream/dcgm-exporter/; tests/upstream checks it against exporter/config.py). */}}
{{- define "gpu-pod-exporter.newestUpstreamRelease" -}}4.6.1-4.8.4{{- end -}}

{{/* The dcgm-exporter release to match: exporter.dcgmExporterCompat, else the release of dcgm-exporter's image
     tag when the values still name that image (its tags read <DCGM>-<exporter>-<os>, e.g. 4.6.0-4.8.3-distroless):
     that exporter version when it is one of the exporter's (4.8.0 ... 4.8.4), 4.8.0 for an older one, nothing
     (the exporter's auto: the newest) for a newer one; else nothing. */}}
{{- define "gpu-pod-exporter.dcgmExporterCompat" -}}
{{- if .Values.exporter.dcgmExporterCompat -}}
{{- .Values.exporter.dcgmExporterCompat -}}
{{- else if include "gpu-pod-exporter.upstreamImage" . -}}
{{- $version := regexFind "-[0-9]+[.][0-9]+[.][0-9]+" (toString .Values.image.tag) | trimPrefix "-" -}}
{{- if $version -}}
{{- if semverCompare "<4.8.0-0" $version -}}4.8.0
{{- else if has $version (list "4.8.0" "4.8.1" "4.8.2" "4.8.3" "4.8.4") -}}{{- $version -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* dcgm-exporter's `config` value (4.8.3 on): {enabled, create, name, key, mountPath, data}. "true" when the
     exporter is to read that --config-file: config.enabled, with config.data (create) or config.name. */}}
{{- define "gpu-pod-exporter.upstreamConfigEnabled" -}}
{{- $config := .Values.config | default dict -}}
{{- if and $config.enabled (or (and $config.create $config.data) (and (not $config.create) $config.name)) -}}true{{- end -}}
{{- end -}}

{{/* The ConfigMap holding that file: ours (created from config.data) or the user's (config.name, create false). */}}
{{- define "gpu-pod-exporter.upstreamConfigMapName" -}}
{{- if .Values.config.create -}}
{{- default (printf "%s-dcgm-exporter-config" (include "gpu-pod-exporter.fullname" .)) .Values.config.name -}}
{{- else -}}
{{- .Values.config.name -}}
{{- end -}}
{{- end -}}

{{- define "gpu-pod-exporter.upstreamCompat" -}}
{{- $v := .Values -}}
{{- if not (hasKey $v "gpuPodExporterUpstreamCompatApplied") -}}
{{- $_ := set $v "gpuPodExporterUpstreamCompatApplied" true -}}
{{- /* arguments: dcgm-exporter's command-line flags; every one is accepted by this exporter. */ -}}
{{- with $v.arguments -}}
{{- $_ := set $v "extraArgs" (concat . ($v.extraArgs | default list)) -}}
{{- end -}}
{{- /* kubeletPath: the host directory of the pod-resources socket. */ -}}
{{- with $v.kubeletPath -}}
{{- $_ := set $v.kubernetes.podResources "hostPath" . -}}
{{- end -}}
{{- /* kubernetes.rbac.create: false means the operator manages the RBAC. */ -}}
{{- if and (kindIs "map" $v.kubernetes.rbac) (hasKey ($v.kubernetes.rbac | default dict) "create") -}}
{{- if not $v.kubernetes.rbac.create -}}
{{- $_ := set $v.rbac "create" false -}}
{{- end -}}
{{- end -}}
{{- /* securityContext: dcgm-exporter's container securityContext, merged over ours (its keys win), except
       the privileges only DCGM needed: capabilities.add (SYS_ADMIN, for profiling) and privileged.
       NVML readings need no capability. */ -}}
{{- with $v.securityContext -}}
{{- $context := omit (deepCopy .) "privileged" -}}
{{- if kindIs "map" $context.capabilities -}}
{{- $_ := set $context "capabilities" (omit $context.capabilities "add") -}}
{{- end -}}
{{- $_ := set $v "containerSecurityContext" (mergeOverwrite (deepCopy $v.containerSecurityContext) $context) -}}
{{- end -}}
{{- /* rollingUpdate: the DaemonSet's maxUnavailable / maxSurge. */ -}}
{{- with $v.rollingUpdate -}}
{{- $rolling := mergeOverwrite (deepCopy ($v.updateStrategy.rollingUpdate | default dict)) (deepCopy .) -}}
{{- $_ := set $v.updateStrategy "rollingUpdate" $rolling -}}
{{- end -}}
{{- /* service.enable / port / address. */ -}}
{{- if hasKey $v.service "enable" -}}
{{- $_ := set $v.service "enabled" $v.service.enable -}}
{{- /* dcgm-exporter's chart renders its ServiceMonitor (default enabled: true) even without the Service,
       where it selects nothing; here there is then no ServiceMonitor, and NOTES says so. */ -}}
{{- if and (not $v.service.enable) $v.serviceMonitor.enabled -}}
{{- $_ := set $v.serviceMonitor "enabled" false -}}
{{- $_ := set $v "gpuPodExporterServiceMonitorDropped" true -}}
{{- end -}}
{{- end -}}
{{- /* 4.8.3's service.webReadTimeout / webWriteTimeout: the exporter's --web-read-timeout / --web-write-timeout. */ -}}
{{- with $v.service.webReadTimeout -}}
{{- $_ := set $v "extraArgs" (append ($v.extraArgs | default list) (printf "--web-read-timeout=%s" .)) -}}
{{- end -}}
{{- with $v.service.webWriteTimeout -}}
{{- $_ := set $v "extraArgs" (append ($v.extraArgs | default list) (printf "--web-write-timeout=%s" .)) -}}
{{- end -}}
{{- with $v.service.port -}}
{{- $_ := set $v.web "port" (. | int64) -}}
{{- end -}}
{{- with $v.service.address -}}
{{- $_ := set $v.web "listenAddress" . -}}
{{- end -}}
{{- /* customMetrics: the complete counters CSV. */ -}}
{{- if and $v.customMetrics (not $v.counters.custom) -}}
{{- $_ := set $v.counters "custom" $v.customMetrics -}}
{{- end -}}
{{- /* extraHostVolumes ({name, hostPath}) and extraConfigMapVolumes (volume specs) become pod volumes. */ -}}
{{- $volumes := list -}}
{{- range $v.extraHostVolumes -}}
{{- $volumes = append $volumes (dict "name" .name "hostPath" (dict "path" .hostPath)) -}}
{{- end -}}
{{- $volumes = concat $volumes ($v.extraConfigMapVolumes | default list) -}}
{{- if $volumes -}}
{{- $_ := set $v "extraVolumes" (concat ($v.extraVolumes | default list) $volumes) -}}
{{- end -}}
{{- /* tlsServerConfig: HTTPS from a Secret; a generated one when it names none (see upstream-tls-secret.yaml). */ -}}
{{- $tls := $v.tlsServerConfig | default dict -}}
{{- if $tls.enabled -}}
{{- $secret := ternary (tpl (toString $tls.existingSecret) $) (printf "%s-tls" (include "gpu-pod-exporter.fullname" $)) (not (empty $tls.existingSecret)) -}}
{{- $_ := set $v.web.tls "enabled" true -}}
{{- $_ := set $v.web.tls "existingSecret" $secret -}}
{{- $_ := set $v.web.tls "certKey" ($tls.certFilename | default "tls.crt") -}}
{{- $_ := set $v.web.tls "keyKey" ($tls.keyFilename | default "tls.key") -}}
{{- with $tls.clientAuthType -}}
{{- $_ := set $v.web.tls "clientAuthType" . -}}
{{- $_ := set $v.web.tls "clientCAKey" ($tls.caFilename | default "ca.crt") -}}
{{- end -}}
{{- end -}}
{{- /* basicAuth.users: dcgm-exporter's are plain passwords (its chart hashes them), so they are ours too.
       Its chart never gave Prometheus credentials; here the first user becomes the ServiceMonitor's
       unless web.basicAuth.passwords already has the configured scrape user. */ -}}
{{- with ($v.basicAuth | default dict).users -}}
{{- $_ := set $v.web.basicAuth "passwords" (mergeOverwrite (deepCopy ($v.web.basicAuth.passwords | default dict)) (deepCopy .)) -}}
{{- if not (hasKey $v.web.basicAuth.passwords $v.serviceMonitor.basicAuth.username) -}}
{{- $_ := set $v.serviceMonitor.basicAuth "username" (keys . | sortAlpha | first) -}}
{{- end -}}
{{- end -}}
{{- /* global.imagePullSecrets: names or {name: ...}, added to imagePullSecrets. */ -}}
{{- $global := $v.global | default dict -}}
{{- $pullSecrets := $v.imagePullSecrets | default list -}}
{{- range ($global.imagePullSecrets | default list) -}}
{{- $name := kindIs "map" . | ternary (get (kindIs "map" . | ternary . dict) "name") (toString .) -}}
{{- $known := false -}}
{{- range $pullSecrets -}}{{- if eq (toString .name) $name -}}{{- $known = true -}}{{- end -}}{{- end -}}
{{- if not $known -}}
{{- $pullSecrets = append $pullSecrets (dict "name" $name) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $v "imagePullSecrets" $pullSecrets -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap a -m / --configmap-data flag (in arguments/extraArgs) or DCGM_EXPORTER_CONFIGMAP_DATA
     (in extraEnv) names, as "<namespace>:<name>"; empty when none (dcgm-exporter's "none" included). */}}
{{- define "gpu-pod-exporter.configMapData" -}}
{{- $found := "" -}}
{{- range .Values.extraEnv -}}
{{- if and (eq .name "DCGM_EXPORTER_CONFIGMAP_DATA") .value -}}{{- $found = .value -}}{{- end -}}
{{- end -}}
{{- $next := false -}}
{{- range .Values.extraArgs -}}
{{- $arg := toString . -}}
{{- if $next -}}
{{- $found = $arg -}}
{{- $next = false -}}
{{- else if has $arg (list "-m" "--configmap-data" "-configmap-data") -}}
{{- $next = true -}}
{{- else if hasPrefix "--configmap-data=" $arg -}}
{{- $found = trimPrefix "--configmap-data=" $arg -}}
{{- else if hasPrefix "-m=" $arg -}}
{{- $found = trimPrefix "-m=" $arg -}}
{{- end -}}
{{- end -}}
{{- if and $found (ne $found "none") -}}{{- $found -}}{{- end -}}
{{- end -}}

{{/* "true" when a pod volume uses dcgm-exporter's counters ConfigMap, which its chart always creates. */}}
{{- define "gpu-pod-exporter.upstreamCountersConfigMapUsed" -}}
{{- if eq (include "gpu-pod-exporter.configMapData" .) (printf "%s:exporter-metrics-config-map" (include "gpu-pod-exporter.namespace" .)) -}}true{{- end -}}
{{- range .Values.extraVolumes -}}
{{- if and (kindIs "map" .configMap) (eq (toString (get (.configMap | default dict) "name")) "exporter-metrics-config-map") -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* NOTES.txt lines: each dcgm-exporter chart key found in the values and what it became. */}}
{{- define "gpu-pod-exporter.upstreamNotes" -}}
{{- $v := .Values -}}
{{- $lines := list -}}
{{- if include "gpu-pod-exporter.upstreamImage" . -}}
{{- $lines = append $lines (printf "image.repository %s is dcgm-exporter's image: the chart runs %s instead" $v.image.repository (include "gpu-pod-exporter.image" .)) -}}
{{- end -}}
{{- with $v.arguments }}{{ $lines = append $lines (printf "arguments -> container args %s (every flag of dcgm-exporter up to %s is accepted; a newer one stops the exporter with a line naming it)" (join " " .) (include "gpu-pod-exporter.newestUpstreamRelease" $)) }}{{ end -}}
{{- with $v.kubeletPath }}{{ $lines = append $lines (printf "kubeletPath -> kubernetes.podResources.hostPath %s" .) }}{{ end -}}
{{- with $v.securityContext }}{{ $lines = append $lines (printf "securityContext -> containerSecurityContext (merged%s)" (ternary "; capabilities.add and privileged dropped: NVML readings need no capability, DCGM needed SYS_ADMIN for profiling" "" (or (hasKey . "privileged") (hasKey (.capabilities | default dict) "add")))) }}{{ end -}}
{{- if hasKey $v "hostPID" }}{{ $lines = append $lines (printf "hostPID -> hostPID %v (processAttribution.enabled sets it for per-process attribution)" $v.hostPID) }}{{ end -}}
{{- with $v.rollingUpdate }}{{ $lines = append $lines "rollingUpdate -> updateStrategy.rollingUpdate" }}{{ end -}}
{{- if hasKey $v.service "enable" }}{{ $lines = append $lines (printf "service.enable -> service.enabled %v" $v.service.enable) }}{{ end -}}
{{- if $v.gpuPodExporterServiceMonitorDropped }}{{ $lines = append $lines "serviceMonitor.enabled is ignored with service.enable false: there is no Service for it to select (dcgm-exporter's chart renders one that selects nothing)" }}{{ end -}}
{{- with $v.service.webReadTimeout }}{{ $lines = append $lines (printf "service.webReadTimeout -> --web-read-timeout=%s" .) }}{{ end -}}
{{- with $v.service.webWriteTimeout }}{{ $lines = append $lines (printf "service.webWriteTimeout -> --web-write-timeout=%s" .) }}{{ end -}}
{{- if include "gpu-pod-exporter.upstreamConfigEnabled" . }}{{ $lines = append $lines (printf "config -> ConfigMap %s (key %s) mounted at %s, read through DCGM_EXPORTER_CONFIG_FILE" (include "gpu-pod-exporter.upstreamConfigMapName" .) $v.config.key $v.config.mountPath) }}{{ end -}}
{{- if and (include "gpu-pod-exporter.upstreamImage" .) $v.image.digest }}{{ $lines = append $lines (printf "image.digest %s pins dcgm-exporter's image and is not used: the chart runs %s" $v.image.digest (include "gpu-pod-exporter.image" .)) }}{{ end -}}
{{- with $v.daemonSetAnnotations }}{{ $lines = append $lines "daemonSetAnnotations -> the DaemonSet's annotations" }}{{ end -}}
{{- if not (kindIs "invalid" $v.serviceAccount.automountServiceAccountToken) }}{{ $lines = append $lines (printf "serviceAccount.automountServiceAccountToken %v -> the pod's automountServiceAccountToken%s" $v.serviceAccount.automountServiceAccountToken (ternary "" " (still true while the exporter reads the Kubernetes API)" $v.serviceAccount.automountServiceAccountToken)) }}{{ end -}}
{{- with include "gpu-pod-exporter.dcgmExporterCompat" . }}{{ $lines = append $lines (printf "dcgm-exporter %s behaviour (GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT): the node label is %s" . (ternary "hostname" "Hostname" (semverCompare ">=4.8.3-0" .))) }}{{ end -}}
{{- with $v.service.port }}{{ $lines = append $lines (printf "service.port -> web.port %v (container and Service port)" .) }}{{ end -}}
{{- with $v.service.address }}{{ $lines = append $lines (printf "service.address -> web.listenAddress %s (DCGM_EXPORTER_LISTEN)" .) }}{{ end -}}
{{- with $v.serviceMonitor.apiVersion }}{{ $lines = append $lines (printf "serviceMonitor.apiVersion -> the ServiceMonitor's apiVersion %s" .) }}{{ end -}}
{{- if and (kindIs "map" $v.kubernetes.rbac) (hasKey ($v.kubernetes.rbac | default dict) "create") }}{{ $lines = append $lines (printf "kubernetes.rbac.create -> rbac.create %v" $v.rbac.create) }}{{ end -}}
{{- with $v.customMetrics }}{{ $lines = append $lines "customMetrics -> counters.custom (the complete counters CSV)" }}{{ end -}}
{{- with $v.extraHostVolumes }}{{ $lines = append $lines "extraHostVolumes -> extraVolumes (hostPath)" }}{{ end -}}
{{- with $v.extraConfigMapVolumes }}{{ $lines = append $lines "extraConfigMapVolumes -> extraVolumes" }}{{ end -}}
{{- if include "gpu-pod-exporter.upstreamCountersConfigMapUsed" . }}{{ $lines = append $lines "ConfigMap exporter-metrics-config-map (key metrics) is created as dcgm-exporter's chart does, with the counters CSV" }}{{ end -}}
{{- if ($v.tlsServerConfig | default dict).enabled }}{{ $lines = append $lines (printf "tlsServerConfig -> web.tls (Secret %s%s)" $v.web.tls.existingSecret (ternary "" ", generated by this chart" (not (empty $v.tlsServerConfig.existingSecret)))) }}{{ end -}}
{{- with ($v.basicAuth | default dict).users }}{{ $lines = append $lines (printf "basicAuth.users -> web.basicAuth.passwords; Prometheus scrapes as %s" $v.serviceMonitor.basicAuth.username) }}{{ end -}}
{{- with $v.initContainers }}{{ $lines = append $lines "initContainers -> the pod's initContainers" }}{{ end -}}
{{- if ($v.debugDump | default dict).enabled }}{{ $lines = append $lines "debugDump is ignored: this exporter writes no debug dumps (/metrics, /health and --debug logs show its state)" }}{{ end -}}
{{- if ($v.kubernetesDRA | default dict).enabled }}{{ $lines = append $lines "kubernetesDRA.enabled -> DRA-allocated GPUs carry their pods and dra_* labels (KUBERNETES_ENABLE_DRA); the ClusterRole reads resourceslices" }}{{ end -}}
{{- with ($v.global | default dict).imageRegistry }}{{ $lines = append $lines (printf "global.imageRegistry -> the image comes from %s" .) }}{{ end -}}
{{- with ($v.global | default dict).imagePullSecrets }}{{ $lines = append $lines "global.imagePullSecrets -> imagePullSecrets" }}{{ end -}}
{{- with include "gpu-pod-exporter.configMapData" . }}{{ $lines = append $lines (printf "-m %s: a Role grants get on that ConfigMap" .) }}{{ end -}}
{{- range $lines }}
  - {{ . }}
{{- end -}}
{{- end -}}
