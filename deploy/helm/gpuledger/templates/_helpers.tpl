{{/* The release's base name: the release name when it contains "gpuledger", else release-gpuledger. */}}
{{- define "gpuledger.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object (Kubernetes' recommended labels, as OpenCost's and Kueue's charts). */}}
{{- define "gpuledger.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: gpuledger
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: gpuledger
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of a component (kept to name + component: the Kustomize base's, so one can
replace the other without recreating the StatefulSet, whose selector cannot change). */}}
{{- define "gpuledger.selector" -}}
app.kubernetes.io/name: gpuledger
app.kubernetes.io/component: {{ . }}
{{- end -}}

{{- define "gpuledger.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "gpuledger.configMapName" -}}
{{- .Values.existingConfigMap | default (printf "%s-config" (include "gpuledger.fullname" .)) -}}
{{- end -}}

{{/* The restricted container security context (Pod Security Standard "restricted"). */}}
{{- define "gpuledger.restricted" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{- define "gpuledger.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
fsGroupChangePolicy: OnRootMismatch
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The env every writer-pod container shares. */}}
{{- define "gpuledger.env" -}}
- name: GPULEDGER_WAREHOUSE
  value: /var/lib/gpuledger/gpuledger.duckdb
- name: GPULEDGER_CONFIG
  value: /etc/gpuledger/gpuledger.yaml
- name: GPULEDGER_STATEMENTS_DIR
  value: /var/lib/gpuledger/statements
- name: GPULEDGER_SECRETS_FILE
  value: /etc/gpuledger/channels/channels.yaml
- name: DAGSTER_HOME
  value: /var/lib/gpuledger/dagster
- name: HOME
  value: /tmp
{{- end -}}

{{/* The Dagster containers' env: the shared env, the StatefulSet's name (the writer refuses an
ordinal other than 0), PostgreSQL, and the scrape left to the scrape container. */}}
{{- define "gpuledger.dagsterEnv" -}}
{{ include "gpuledger.env" . }}
- name: GPULEDGER_STATEFULSET
  value: {{ include "gpuledger.fullname" . }}
- name: DAGSTER_PG_HOST
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecrets.postgres }}, key: host}}
- name: DAGSTER_PG_PORT
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecrets.postgres }}, key: port}}
- name: DAGSTER_PG_DB
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecrets.postgres }}, key: database}}
- name: DAGSTER_PG_USER
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecrets.postgres }}, key: username}}
- name: DAGSTER_PG_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .Values.existingSecrets.postgres }}, key: password}}
- name: GPULEDGER_SCRAPE_SERVICE
  value: "1"
{{- end -}}

{{- define "gpuledger.mounts" -}}
- {name: data, mountPath: /var/lib/gpuledger}
- {name: config, mountPath: /etc/gpuledger/gpuledger.yaml, subPath: gpuledger.yaml, readOnly: true}
- {name: config, mountPath: /var/lib/gpuledger/dagster/dagster.yaml, subPath: dagster.yaml, readOnly: true}
- {name: alert-channels, mountPath: /etc/gpuledger/channels, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- end -}}

{{/* A liveness/readiness check by a file's age (the loops touch their --heartbeat each round). */}}
{{- define "gpuledger.heartbeatProbe" -}}
exec:
  command: ["sh", "-c", "test -n \"$(find {{ .file }} -mmin -{{ .minutes }} 2>/dev/null)\""]
initialDelaySeconds: 120
periodSeconds: 60
timeoutSeconds: 10
failureThreshold: 3
{{- end -}}

{{/* An HTTP GET from inside the container (for servers that listen on the pod's loopback only). */}}
{{- define "gpuledger.loopbackProbe" -}}
exec:
  command: ["python", "-c", "import urllib.request; urllib.request.urlopen('{{ . }}', timeout=8)"]
{{- end -}}

{{- define "gpuledger.enforcerRules" -}}
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "patch"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list"]
- apiGroups: [""]
  resources: ["pods/eviction"]
  verbs: ["create"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end -}}
