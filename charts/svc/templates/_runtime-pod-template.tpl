{{/*
The per-project runtime pod, as the Kubernetes runtime driver renders it.

The driver reads this file (SVC_RUNTIME_POD_TEMPLATE_FILE) once, executes it
with Go text/template using the delimiters "[[" and "]]" (so Helm leaves them
alone) and these fields, then decodes the result as a core/v1 Pod:

  [[ .PodName ]]          the pod's name (DNS-1123, chosen by the driver)
  [[ .Namespace ]]        the runtime namespace
  [[ .ProjectID ]]        the project (SVC_PROJECT_ID and a label)
  [[ .SyncMode ]]         the project's cloud sync mode at assignment time
                          (SVC_CLOUD_SYNC_MODE: s3, dual_shadow, git_only;
                          spec 3.1: a change takes effect at the next pod)
  [[ .TokenSecretName ]]  the Secret the driver creates for this project
                          holding its runtime token under the key "token"

The podagent runs as a native sidecar (an initContainer with restartPolicy
Always): it restores the workspace before the agent container starts (its
startup probe passes once it serves, i.e. after the cold start), and on pod
deletion Kubernetes stops the agent container first, then sends podagent
SIGTERM, which drains and flushes (spec 10.2) within SVC_SHUTDOWN_GRACE:
terminationGracePeriodSeconds minus runtime.agent.stopSeconds, the part of
the grace period left once the agent exited. No preStop hook is needed.
*/}}
{{- define "svc.runtimePodTemplate" -}}
{{- $r := .Values.runtime }}
{{- if lt (int $r.terminationGracePeriodSeconds) 21 }}
{{- fail "runtime.terminationGracePeriodSeconds must be at least 21: podagent's shutdown flushes git (5 s), snapshots HEAD (5 s) and flushes S3 (10 s) after draining, with a 1 s margin" }}
{{- end }}
{{- $podagentGrace := sub (int $r.terminationGracePeriodSeconds) (int $r.agent.stopSeconds) }}
{{- if lt $podagentGrace 21 }}
{{- fail "runtime.terminationGracePeriodSeconds minus runtime.agent.stopSeconds must be at least 21: podagent, stopped after the agent container, flushes git (5 s), snapshots HEAD (5 s) and flushes S3 (10 s), with a 1 s margin" }}
{{- end }}
apiVersion: v1
kind: Pod
metadata:
  name: "[[ .PodName ]]"
  namespace: "[[ .Namespace ]]"
  labels:
    {{- include "svc.runtime.selectorLabels" . | nindent 4 }}
    app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
    app.kubernetes.io/managed-by: svc-apiserver
    {{- with .Values.commonLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    svc.dev/project-id: "[[ .ProjectID ]]"
    {{- with $r.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    svc.dev/cloud-sync-mode: "[[ .SyncMode ]]"
    {{- with $r.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "svc.runtime.serviceAccountName" . }}
  automountServiceAccountToken: false
  enableServiceLinks: false
  restartPolicy: Always
  terminationGracePeriodSeconds: {{ $r.terminationGracePeriodSeconds }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $r.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  {{- with $r.runtimeClassName }}
  runtimeClassName: {{ . }}
  {{- end }}
  securityContext:
    {{- toYaml $r.podSecurityContext | nindent 4 }}
  initContainers:
    - name: podagent
      image: {{ include "svc.image" (list $r.podagent.image .) }}
      imagePullPolicy: {{ $r.podagent.image.pullPolicy }}
      # Native sidecar: runs for the pod's lifetime, stopped after the agent.
      restartPolicy: Always
      args: ["serve"]
      ports:
        - name: podagent
          containerPort: {{ $r.port }}
          protocol: TCP
      env:
        - name: SVC_PROJECT_ID
          value: "[[ .ProjectID ]]"
        - name: SVC_CLOUD_SYNC_MODE
          value: "[[ .SyncMode ]]"
        - name: SVC_API_URL
          value: {{ include "svc.apiURL" . | quote }}
        - name: SVC_RUNTIME_TOKEN_FILE
          value: {{ include "svc.secretsDir" . }}/runtime-token
        - name: SVC_WORKSPACE_DIR
          value: /workspace
        - name: SVC_DATA_DIR
          value: /data
        - name: SVC_HTTP_ADDR
          value: ":{{ $r.port }}"
        - name: SVC_LOG_LEVEL
          value: {{ .Values.logLevel | quote }}
        - name: HOME
          value: /tmp
        - name: LARGE_FILE_BYTES
          value: {{ $r.largeFileBytes | int64 | quote }}
        - name: SVC_DEGRADE_AFTER_FAILURES
          value: {{ $r.degradeAfterFailures | int | quote }}
        # What is left of the grace period once the agent container exited
        # (podagent fits its drain and flushes into it).
        - name: SVC_SHUTDOWN_GRACE
          value: "{{ $podagentGrace }}s"
        {{- include "svc.storageEnv" . | nindent 8 }}
        {{- with .Values.callbackAllowedNets }}
        - name: SVC_CALLBACK_ALLOWED_NETS
          value: {{ join "," . | quote }}
        {{- end }}
      volumeMounts:
        - name: workspace
          mountPath: /workspace
        - name: data
          mountPath: /data
        - name: tmp
          mountPath: /tmp
        - name: secrets
          mountPath: {{ include "svc.secretsDir" . }}
          readOnly: true
      startupProbe:
        httpGet: {path: /healthz, port: podagent}
        periodSeconds: 2
        failureThreshold: 150
      readinessProbe:
        httpGet: {path: /readyz, port: podagent}
        periodSeconds: 5
        failureThreshold: 3
      livenessProbe:
        httpGet: {path: /healthz, port: podagent}
        periodSeconds: 10
        timeoutSeconds: 3
        failureThreshold: 6
      securityContext:
        {{- toYaml $r.podagent.securityContext | nindent 8 }}
      resources:
        {{- toYaml $r.podagent.resources | nindent 8 }}
  containers:
    - name: agent
      image: {{ include "svc.image" (list $r.agent.image .) }}
      imagePullPolicy: {{ $r.agent.image.pullPolicy }}
      {{- with $r.agent.command }}
      command:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $r.agent.args }}
      args:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      workingDir: /workspace
      env:
        - name: SVC_PROJECT_ID
          value: "[[ .ProjectID ]]"
        - name: SVC_WORKSPACE_DIR
          value: /workspace
        - name: HOME
          value: /tmp
        {{- with $r.agent.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      volumeMounts:
        - name: workspace
          mountPath: /workspace
        - name: tmp
          mountPath: /tmp
      securityContext:
        {{- toYaml $r.agent.securityContext | nindent 8 }}
      resources:
        {{- toYaml $r.agent.resources | nindent 8 }}
  volumes:
    - name: workspace
      emptyDir:
        {{- with $r.workspace.medium }}
        medium: {{ . }}
        {{- end }}
        sizeLimit: {{ $r.workspace.sizeLimit }}
    - name: data
      emptyDir:
        sizeLimit: 1Gi
    - name: tmp
      emptyDir:
        sizeLimit: 2Gi
    - name: secrets
      projected:
        defaultMode: 0440
        sources:
          - secret:
              name: "[[ .TokenSecretName ]]"
              items:
                - key: token
                  path: runtime-token
          {{- include "svc.s3SecretSources" . | nindent 10 }}
  {{- with $r.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $r.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $r.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
