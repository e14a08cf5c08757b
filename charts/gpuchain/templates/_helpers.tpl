{{- define "gpuchain.labels" -}}
app.kubernetes.io/name: gpuchain
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "gpuchain.image" -}}
{{- $version := .Values.operator.version | default .Chart.AppVersion -}}
{{ printf "%s/%s:%s" .Values.operator.repository .Values.operator.image $version }}
{{- end -}}

{{/* An operand block of the ClusterPolicy: the values as given, image version defaulting to appVersion. */}}
{{- define "gpuchain.gpuchainOperand" -}}
{{- $block := deepCopy .block -}}
{{- if not (hasKey $block "version") -}}
{{- $_ := set $block "version" .root.Chart.AppVersion -}}
{{- end -}}
{{- toYaml $block -}}
{{- end -}}
