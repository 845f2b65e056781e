{{/*
Names and labels.
*/}}
{{- define "svc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "svc.fullname" -}}
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

{{- define "svc.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "svc.labels" -}}
helm.sh/chart: {{ include "svc.chart" . }}
{{ include "svc.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "svc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "svc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector of the API server pods. */}}
{{- define "svc.apiserver.selectorLabels" -}}
{{ include "svc.selectorLabels" . }}
app.kubernetes.io/component: apiserver
{{- end }}

{{/* Selector of the runtime (per-project) pods. */}}
{{- define "svc.runtime.selectorLabels" -}}
{{ include "svc.selectorLabels" . }}
app.kubernetes.io/component: runtime
{{- end }}

{{- define "svc.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "svc.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "svc.runtime.serviceAccountName" -}}
{{- if .Values.runtime.serviceAccount.create }}
{{- default (printf "%s-runtime" (include "svc.fullname" .)) .Values.runtime.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.runtime.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "svc.runtime.namespace" -}}
{{- default .Release.Namespace .Values.runtime.namespace }}
{{- end }}

{{/* Image reference: repository@digest, else repository:tag (tag defaults to appVersion). */}}
{{- define "svc.image" -}}
{{- $img := index . 0 }}{{- $root := index . 1 }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion $img.tag) }}
{{- end }}
{{- end }}

{{/* URL runtime pods call the API at (SVC_API_URL): the in-cluster Service. */}}
{{- define "svc.apiURL" -}}
{{- printf "http://%s.%s.svc:%v" (include "svc.fullname" .) .Release.Namespace .Values.apiserver.service.port }}
{{- end }}

{{- define "svc.publicURL" -}}
{{- if .Values.apiserver.publicURL }}
{{- .Values.apiserver.publicURL | trimSuffix "/" }}
{{- else if and .Values.ingress.enabled .Values.ingress.hosts }}
{{- $host := (first .Values.ingress.hosts).host }}
{{- if .Values.ingress.tls }}https{{ else }}http{{ end }}://{{ $host }}
{{- end }}
{{- end }}

{{/* Name of the Secret holding credential $c (secretName, else secrets.existingSecret). */}}
{{- define "svc.secretName" -}}
{{- $c := index . 0 }}{{- $root := index . 1 }}
{{- $name := default $root.Values.secrets.existingSecret $c.secretName }}
{{- required "secrets.existingSecret (or the credential's secretName) is required: the chart never holds credentials" $name }}
{{- end }}

{{/* Where secret files are mounted in every container. */}}
{{- define "svc.secretsDir" -}}/etc/svc/secrets{{- end }}

{{/*
Projected volume sources of the S3 credentials (shared by the API server and
the podagent sidecar).
*/}}
{{- define "svc.s3SecretSources" -}}
- secret:
    name: {{ include "svc.secretName" (list .Values.secrets.s3AccessKey .) }}
    items:
      - key: {{ .Values.secrets.s3AccessKey.key }}
        path: s3-access-key
- secret:
    name: {{ include "svc.secretName" (list .Values.secrets.s3SecretKey .) }}
    items:
      - key: {{ .Values.secrets.s3SecretKey.key }}
        path: s3-secret-key
{{- end }}

{{/* Object storage env (non-secret part + *_FILE), shared by the API server and pods. */}}
{{- define "svc.storageEnv" -}}
- name: SVC_STORAGE
  value: s3
- name: SVC_S3_ENDPOINT
  value: {{ required "s3.endpoint is required (host:port)" .Values.s3.endpoint | quote }}
- name: SVC_S3_BUCKET
  value: {{ required "s3.bucket is required" .Values.s3.bucket | quote }}
- name: SVC_S3_USE_SSL
  value: {{ .Values.s3.useSSL | quote }}
- name: SVC_S3_ACCESS_KEY_FILE
  value: {{ include "svc.secretsDir" . }}/s3-access-key
- name: SVC_S3_SECRET_KEY_FILE
  value: {{ include "svc.secretsDir" . }}/s3-secret-key
{{- end }}

{{/* Checksum of a rendered template, for rollouts on config change. */}}
{{- define "svc.checksum" -}}
{{- $tpl := index . 0 }}{{- $root := index . 1 }}
{{- include (print $root.Template.BasePath $tpl) $root | sha256sum }}
{{- end }}
