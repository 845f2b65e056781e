{{/*
Environment of `apiserver serve` and `apiserver migrate` (docs/design.md §5).
Credentials are files under svc.secretsDir, passed as SVC_*_FILE.
*/}}
{{- define "svc.apiserver.env" -}}
- name: SVC_HTTP_ADDR
  value: ":{{ .Values.apiserver.port }}"
- name: SVC_DATA_DIR
  value: /data
- name: HOME
  value: /tmp
- name: SVC_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: SVC_DATABASE_URL_FILE
  value: {{ include "svc.secretsDir" . }}/database-url
- name: SVC_RUNTIME_AUTH_SECRET_FILE
  value: {{ include "svc.secretsDir" . }}/runtime-auth-secret
{{ include "svc.storageEnv" . }}
- name: SVC_RUNTIME_DRIVER
  value: kubernetes
- name: SVC_RUNTIME_NAMESPACE
  value: {{ include "svc.runtime.namespace" . | quote }}
- name: SVC_RUNTIME_POD_TEMPLATE_FILE
  value: /etc/svc/runtime/pod-template.yaml
- name: SVC_RUNTIME_IDLE_TIMEOUT
  value: {{ .Values.runtime.idleTimeout | quote }}
- name: SVC_RUNTIME_START_TIMEOUT
  value: {{ .Values.runtime.startTimeout | quote }}
- name: SVC_KUBE_CLIENT_QPS
  value: {{ .Values.runtime.rateLimits.kubeClient.qps | quote }}
- name: SVC_KUBE_CLIENT_BURST
  value: {{ .Values.runtime.rateLimits.kubeClient.burst | quote }}
- name: SVC_RUNTIME_POD_CREATE_QPS
  value: {{ .Values.runtime.rateLimits.podCreate.qps | quote }}
- name: SVC_RUNTIME_POD_CREATE_BURST
  value: {{ .Values.runtime.rateLimits.podCreate.burst | quote }}
- name: SVC_RUNTIME_POD_CREATE_QUEUE
  value: {{ .Values.runtime.rateLimits.podCreate.queue | quote }}
- name: SVC_RUNTIME_WARM_POOL_SIZE
  value: {{ .Values.runtime.warmPool.size | quote }}
- name: SVC_MODELS_FILE
  value: /etc/svc/catalog/models.yaml
- name: SVC_PLANS_FILE
  value: /etc/svc/catalog/plans.yaml
{{- with .Values.upstream.baseURL }}
- name: SVC_UPSTREAM_BASE_URL
  value: {{ . | quote }}
{{- end }}
{{- if .Values.secrets.upstreamAPIKey.enabled }}
- name: SVC_UPSTREAM_API_KEY_FILE
  value: {{ include "svc.secretsDir" . }}/upstream-api-key
{{- end }}
- name: SVC_UPSTREAM_TIMEOUT
  value: {{ .Values.upstream.timeout | quote }}
- name: SVC_MAX_BODY_BYTES
  value: {{ .Values.apiserver.maxBodyBytes | int64 | quote }}
- name: SVC_HYDRATE_DISK_BUDGET
  value: {{ .Values.apiserver.dataDir.hydrateDiskBudgetBytes | int64 | quote }}
{{- with include "svc.publicURL" . }}
- name: SVC_PUBLIC_URL
  value: {{ . | quote }}
{{- end }}
{{- with .Values.callbackAllowedNets }}
- name: SVC_CALLBACK_ALLOWED_NETS
  value: {{ join "," . | quote }}
{{- end }}
{{- with .Values.apiserver.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "svc.apiserver.volumeMounts" -}}
- name: data
  mountPath: /data
- name: tmp
  mountPath: /tmp
- name: secrets
  mountPath: {{ include "svc.secretsDir" . }}
  readOnly: true
- name: catalog
  mountPath: /etc/svc/catalog
  readOnly: true
- name: runtime-pod-template
  mountPath: /etc/svc/runtime
  readOnly: true
{{- end }}
