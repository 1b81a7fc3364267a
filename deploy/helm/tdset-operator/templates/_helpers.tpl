{{/* The release's name, or release-chart when the release name does not contain the chart's. */}}
{{- define "tdset-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tdset-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* No managed-by label: deploy/ is rendered from this chart and applied without Helm. */}}
{{- define "tdset-operator.labels" -}}
{{ include "tdset-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tdset-operator
{{- end -}}

{{- define "tdset-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tdset-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "tdset-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The wake proxy's pods: a name of their own, so no selector of the operator's picks them. */}}
{{- define "tdset-operator.wakeProxySelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-wake-proxy
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tdset-operator.wakeProxyLabels" -}}
{{ include "tdset-operator.wakeProxySelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tdset-operator
app.kubernetes.io/component: wake-proxy
{{- end -}}

{{- define "tdset-operator.wakeProxyName" -}}
{{- printf "%s-wake-proxy" (include "tdset-operator.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
