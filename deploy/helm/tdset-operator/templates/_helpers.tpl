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

{{/* Two releases that would reconcile the same TDSets, or whose slice policies would refuse
   each other's operator, are refused: each release's ClusterRole says what it watches (every
   namespace "*", or one). Seen where Helm may look (install, upgrade); `helm template` sees
   none, and a release with rbac.create false makes no ClusterRole to be seen by. */}}
{{- define "tdset-operator.refuseOverlappingReleases" -}}
{{- $mine := .Values.watchNamespace | default "*" }}
{{- $roles := lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" "" }}
{{- range $role := ($roles.items | default list) }}
{{- $labels := $role.metadata.labels | default dict }}
{{- $notes := $role.metadata.annotations | default dict }}
{{- if and (eq (get $labels "app.kubernetes.io/part-of") "tdset-operator") (hasKey $notes "schedule.rs/watch-namespace") }}
{{- $release := get $notes "meta.helm.sh/release-name" }}
{{- $releaseNs := get $notes "meta.helm.sh/release-namespace" }}
{{- if not (and (eq $release $.Release.Name) (eq $releaseNs $.Release.Namespace)) }}
{{- $theirs := get $notes "schedule.rs/watch-namespace" }}
{{- if or (eq $mine "*") (eq $theirs "*") (eq $mine $theirs) }}
{{- $say := dict "*" "every namespace" }}
{{- fail (printf "release %s (namespace %s) already reconciles the TDSets of %s, and this one would reconcile those of %s: two operators would write the same workloads, and each one's EndpointSlice policy would refuse the other's. Give each release a watchNamespace of its own (and the second crds.install=false), or uninstall the other first" $release $releaseNs (get $say $theirs | default (printf "namespace %s" $theirs)) (get $say $mine | default (printf "namespace %s" $mine))) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}
