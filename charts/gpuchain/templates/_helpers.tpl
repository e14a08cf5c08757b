{{- define "gpuchain.labels" -}}
app.kubernetes.io/name: gpuchain
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The one gpuchain image: operator.repository/operator.image:operator.version (default appVersion),
     or operator.repository/operator.image@sha256:... when the version is a digest. */}}
{{- define "gpuchain.image" -}}
{{- $version := .Values.operator.version | default .Chart.AppVersion -}}
{{- if hasPrefix "sha256:" $version -}}
{{ printf "%s/%s@%s" .Values.operator.repository .Values.operator.image $version }}
{{- else -}}
{{ printf "%s/%s:%s" .Values.operator.repository .Values.operator.image $version }}
{{- end -}}
{{- end -}}

{{/* Log format of every gpuchain container the chart runs (logFormat: text | json). */}}
{{- define "gpuchain.logEnv" -}}
- name: GPUCHAIN_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- end -}}

{{/* imagePullSecrets of the gpuchain pods, from operator.imagePullSecrets. */}}
{{- define "gpuchain.pullSecrets" -}}
{{- with .Values.operator.imagePullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A gpuchain operand block of the ClusterPolicy: the values as given; repository, image and
     version default to the operator's (so one --set operator.repository/version moves them all). */}}
{{- define "gpuchain.gpuchainOperand" -}}
{{- $block := deepCopy .block -}}
{{- $op := .root.Values.operator -}}
{{- if not (hasKey $block "repository") -}}
{{- $_ := set $block "repository" $op.repository -}}
{{- end -}}
{{- if not (hasKey $block "image") -}}
{{- $_ := set $block "image" $op.image -}}
{{- end -}}
{{- if not (hasKey $block "version") -}}
{{- $_ := set $block "version" ($op.version | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- if and $op.imagePullSecrets (not (hasKey $block "imagePullSecrets")) -}}
{{- $_ := set $block "imagePullSecrets" $op.imagePullSecrets -}}
{{- end -}}
{{- toYaml $block -}}
{{- end -}}

{{/* Whether gpu-health removes a startup taint (remediation.enabled and remediation.gateStartup.enabled). */}}
{{- define "gpuchain.gatesStartup" -}}
{{- $r := .Values.remediation | default dict -}}
{{- if and $r.enabled ($r.gateStartup | default dict).enabled -}}true{{- end -}}
{{- end -}}

{{/* Tolerations of every DaemonSet of the chain on GPU nodes (the operands, gpu-health, the DRA
     plugin): daemonsets.tolerations, plus the startup taint while gpu-health gates on it. The chain
     must start on a node that still carries the taint, or nothing would ever lift it. */}}
{{- define "gpuchain.nodeTolerations" -}}
{{- $tolerations := .Values.daemonsets.tolerations | default list -}}
{{- if include "gpuchain.gatesStartup" . -}}
{{- $tolerations = append $tolerations (dict "key" .Values.remediation.gateStartup.taint "operator" "Exists" "effect" "NoSchedule") -}}
{{- end -}}
{{- toYaml $tolerations -}}
{{- end -}}
