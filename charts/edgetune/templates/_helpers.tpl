{{/* ---------------------------------------------------------------- names ---------- */}}

{{- define "edgetune.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* "<release>-edgetune", or the release name when it already contains the chart name. */}}
{{- define "edgetune.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's resource name: (dict "root" $ "component" "coordinator") */}}
{{- define "edgetune.componentName" -}}
{{- printf "%s-%s" (include "edgetune.fullname" .root | trunc 50 | trimSuffix "-") .component -}}
{{- end -}}

{{- define "edgetune.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* ---------------------------------------------------------------- labels --------- */}}

{{- define "edgetune.labels" -}}
helm.sh/chart: {{ include "edgetune.chart" . }}
{{ include "edgetune.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: edgetune
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "edgetune.selectorLabels" -}}
app.kubernetes.io/name: {{ include "edgetune.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* (dict "root" $ "component" "coordinator") */}}
{{- define "edgetune.componentLabels" -}}
{{ include "edgetune.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "edgetune.componentSelectorLabels" -}}
{{ include "edgetune.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* ---------------------------------------------------------------- images --------- */}}

{{/* (dict "root" $ "image" .Values.coordinator.image) -> registry/repository:tag */}}
{{- define "edgetune.image" -}}
{{- $g := .root.Values.image -}}
{{- $tag := .image.tag | default $g.tag | default .root.Chart.AppVersion | toString -}}
{{- if $g.registry -}}
{{- printf "%s/%s:%s" $g.registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "edgetune.pullPolicy" -}}
{{- .image.pullPolicy | default .root.Values.image.pullPolicy -}}
{{- end -}}

{{/* Use as: {{- with include "edgetune.imagePullSecrets" $ }}{{ . | nindent N }}{{- end }} */}}
{{- define "edgetune.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets -}}
imagePullSecrets:
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* ---------------------------------------------------------------- accounts ------- */}}

{{/* (dict "root" $ "component" "coordinator" "sa" .Values.coordinator.serviceAccount) */}}
{{- define "edgetune.serviceAccountName" -}}
{{- if .sa.create -}}
{{- .sa.name | default (include "edgetune.componentName" .) -}}
{{- else -}}
{{- .sa.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* ---------------------------------------------------------------- security ------- */}}

{{/* Pod securityContext of every non-root pod (uid/gid 10001: the images' `edgetune` user). */}}
{{- define "edgetune.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container securityContext of every non-root container. */}}
{{- define "edgetune.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* ---------------------------------------------------------------- redis ---------- */}}

{{- define "edgetune.redisName" -}}
{{- include "edgetune.componentName" (dict "root" . "component" "redis") -}}
{{- end -}}

{{/* External Redis: the Secret holding the full URL, and its key. */}}
{{- define "edgetune.redisUrlSecretName" -}}
{{- .Values.redis.external.existingSecret | default (printf "%s-url" (include "edgetune.redisName" .)) -}}
{{- end -}}

{{- define "edgetune.redisUrlSecretKey" -}}
{{- if .Values.redis.external.existingSecret -}}
{{- .Values.redis.external.existingSecretKey -}}
{{- else -}}
redis-url
{{- end -}}
{{- end -}}

{{/* Bundled Redis: the Secret holding the password, and its key. */}}
{{- define "edgetune.redisPasswordSecretName" -}}
{{- .Values.redis.auth.existingSecret | default (printf "%s-auth" (include "edgetune.redisName" .)) -}}
{{- end -}}

{{- define "edgetune.redisPasswordSecretKey" -}}
{{- if .Values.redis.auth.existingSecret -}}
{{- .Values.redis.auth.existingSecretPasswordKey -}}
{{- else -}}
redis-password
{{- end -}}
{{- end -}}

{{/* The bundled Redis' password: kept from the live Secret on upgrade, else generated. */}}
{{- define "edgetune.redisPassword" -}}
{{- $name := printf "%s-auth" (include "edgetune.redisName" .) -}}
{{- $live := lookup "v1" "Secret" .Release.Namespace $name -}}
{{- if and $live $live.data (index $live.data "redis-password") -}}
{{- index $live.data "redis-password" | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}

{{/* EDGETUNE_REDIS for every service. Bundled: composed in the pod from the password Secret
     (Kubernetes expands $(VAR)), so an existing Secret works too; external: the URL Secret. */}}
{{- define "edgetune.redisEnv" -}}
{{- if .Values.redis.enabled -}}
{{- $host := printf "%s.%s.svc:%d" (include "edgetune.redisName" .) .Release.Namespace (int .Values.redis.port) -}}
{{- if .Values.redis.auth.enabled -}}
- name: EDGETUNE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "edgetune.redisPasswordSecretName" . }}
      key: {{ include "edgetune.redisPasswordSecretKey" . }}
- name: EDGETUNE_REDIS
  value: {{ printf "redis://:$(EDGETUNE_REDIS_PASSWORD)@%s/%d" $host (int .Values.redis.database) | quote }}
{{- else -}}
- name: EDGETUNE_REDIS
  value: {{ printf "redis://%s/%d" $host (int .Values.redis.database) | quote }}
{{- end -}}
{{- else -}}
- name: EDGETUNE_REDIS
  valueFrom:
    secretKeyRef:
      name: {{ include "edgetune.redisUrlSecretName" . }}
      key: {{ include "edgetune.redisUrlSecretKey" . }}
{{- end -}}
{{- end -}}

{{/* ---------------------------------------------------------------- env ------------ */}}

{{/* Env every service gets: port, metrics port, log level, the Redis URL, the pod's identity.
     (dict "root" $ "port" 50051 "metricsPort" 9090) */}}
{{- define "edgetune.commonEnv" -}}
- name: EDGETUNE_HOST
  value: "0.0.0.0"
- name: EDGETUNE_PORT
  value: {{ .port | quote }}
- name: EDGETUNE_METRICS_PORT
  value: {{ .metricsPort | quote }}
- name: EDGETUNE_LOG_LEVEL
  value: {{ .root.Values.logLevel | quote }}
{{ include "edgetune.redisEnv" .root }}
- name: EDGETUNE_POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: EDGETUNE_POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: EDGETUNE_POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: HOME
  value: /tmp
{{- end -}}

{{/* In-cluster gRPC addresses ("host:port") of the services. */}}
{{- define "edgetune.address" -}}
{{- $c := index .root.Values .component -}}
{{- printf "%s.%s.svc:%d" (include "edgetune.componentName" .) .root.Release.Namespace (int $c.port) -}}
{{- end -}}

{{/* Ray client address of the estimator's Ray head, "" when Ray is off. */}}
{{- define "edgetune.useKubeRay" -}}
{{- if and .Values.ray.enabled (or (eq .Values.ray.mode "kuberay") (and (eq .Values.ray.mode "auto") (.Capabilities.APIVersions.Has "ray.io/v1"))) -}}
true
{{- end -}}
{{- end -}}

{{- define "edgetune.rayHeadService" -}}
{{- if include "edgetune.useKubeRay" . -}}
{{- printf "%s-head-svc" (include "edgetune.componentName" (dict "root" . "component" "ray")) -}}
{{- else -}}
{{- include "edgetune.componentName" (dict "root" . "component" "ray-head") -}}
{{- end -}}
{{- end -}}

{{- define "edgetune.rayAddress" -}}
{{- if .Values.ray.enabled -}}
{{- printf "ray://%s.%s.svc:%d" (include "edgetune.rayHeadService" .) .Release.Namespace (int .Values.ray.clientPort) -}}
{{- end -}}
{{- end -}}

{{/* ---------------------------------------------------------------- probes --------- */}}

{{/* gRPC health probes (grpc.health.v1, overall status) on the service port. */}}
{{/* gRPC health probes on the plain-text health port (security.healthPort): kubelet speaks no TLS. */}}
{{- define "edgetune.grpcProbes" -}}
startupProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: 5
  failureThreshold: {{ .startupFailures | default 36 }}
readinessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
livenessProbe:
  grpc:
    port: {{ .port }}
  periodSeconds: 20
  timeoutSeconds: 5
  failureThreshold: 3
{{- end -}}

{{- define "edgetune.metricsAnnotations" -}}
{{- if .root.Values.metrics.podAnnotations -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: {{ .root.Values.metrics.path | quote }}
{{- end -}}
{{- end -}}

{{/* ---------------------------------------------------------------- network policy -- */}}

{{/* A NetworkPolicy peer: pods of this release with a component label. */}}
{{- define "edgetune.np.peer" -}}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ .root.Release.Namespace }}
  podSelector:
    matchLabels:
      {{- include "edgetune.selectorLabels" .root | nindent 6 }}
      app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* ---------------------------------------------------------------- security -- */}}
{{/* The TLS source in effect: certManager, secret, generate or none (values.yaml, security.tls.mode). */}}
{{- define "edgetune.tlsMode" -}}
{{- $t := .Values.security.tls -}}
{{- if ne $t.mode "auto" -}}
{{- $t.mode -}}
{{- else if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}
certManager
{{- else if $t.existingSecret -}}
secret
{{- else -}}
generate
{{- end -}}
{{- end -}}

{{- define "edgetune.tlsSecretName" -}}
{{- if eq (include "edgetune.tlsMode" .) "secret" -}}
{{- required "security.tls.existingSecret is required with security.tls.mode=secret" .Values.security.tls.existingSecret -}}
{{- else -}}
{{- include "edgetune.fullname" . }}-tls
{{- end -}}
{{- end -}}

{{/* The names the services' certificate carries: every Service, short and qualified. */}}
{{- define "edgetune.tlsDnsNames" -}}
{{- range $c := list "coordinator" "estimator" "optimizer" "agent" }}
{{- $n := include "edgetune.componentName" (dict "root" $ "component" $c) }}
- {{ $n }}
- {{ $n }}.{{ $.Release.Namespace }}
- {{ $n }}.{{ $.Release.Namespace }}.svc
- {{ $n }}.{{ $.Release.Namespace }}.svc.cluster.local
{{- end }}
{{- end -}}

{{/* TLS, tokens, the health port, --insecure: env of a service container (dict "root" $ "component" NAME). */}}
{{- define "edgetune.securityEnv" -}}
{{- $root := .root -}}
{{- $s := $root.Values.security -}}
- name: EDGETUNE_HEALTH_PORT
  value: {{ $s.healthPort | quote }}
{{- if ne (include "edgetune.tlsMode" $root) "none" }}
- name: EDGETUNE_TLS_CERT
  value: /etc/edgetune/tls/tls.crt
- name: EDGETUNE_TLS_KEY
  value: /etc/edgetune/tls/tls.key
# The CA also verifies the services this one calls (coordinator -> estimator / optimizer, agent -> coordinator).
- name: EDGETUNE_TLS_CA
  value: /etc/edgetune/tls/ca.crt
{{- if eq .component "coordinator" }}
# A standby reaches the leader at its pod IP: verify it under the Service's name.
- name: EDGETUNE_TLS_SERVER_NAME
  value: {{ printf "%s.%s.svc" (include "edgetune.componentName" .) $root.Release.Namespace | quote }}
{{- end }}
{{- end }}
{{- with $s.tokens.existingSecret }}
- name: EDGETUNE_AUTH_TOKENS
  value: /etc/edgetune/auth/{{ $s.tokens.fileKey }}
{{- $key := "" }}
{{- if eq $.component "coordinator" }}{{ $key = $s.tokens.coordinatorTokenKey }}{{ end }}
{{- if eq $.component "agent" }}{{ $key = $s.tokens.agentTokenKey }}{{ end }}
{{- if $key }}
- name: EDGETUNE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- if $s.insecure }}
- name: EDGETUNE_INSECURE
  value: "true"
{{- end }}
{{- end -}}

{{- define "edgetune.securityVolumeMounts" -}}
{{- if ne (include "edgetune.tlsMode" .) "none" }}
- name: tls
  mountPath: /etc/edgetune/tls
  readOnly: true
{{- end }}
{{- if .Values.security.tokens.existingSecret }}
- name: auth-tokens
  mountPath: /etc/edgetune/auth
  readOnly: true
{{- end }}
{{- end -}}

{{- define "edgetune.securityVolumes" -}}
{{- if ne (include "edgetune.tlsMode" .) "none" }}
- name: tls
  secret:
    secretName: {{ include "edgetune.tlsSecretName" . }}
{{- end }}
{{- with .Values.security.tokens.existingSecret }}
# Only the token file: the tokens the coordinator and the agents send reach them as env vars.
- name: auth-tokens
  secret:
    secretName: {{ . }}
    items:
      - key: {{ $.Values.security.tokens.fileKey }}
        path: {{ $.Values.security.tokens.fileKey }}
{{- end }}
{{- end -}}

{{/* Client peers: pods labelled networkPolicy.clientPodLabels in clientNamespaces (default: the
     release's), then any extra networkPolicy.clientsFrom peers. */}}
{{- define "edgetune.np.clients" -}}
{{- $np := .Values.networkPolicy -}}
{{- $namespaces := $np.clientNamespaces | default (list .Release.Namespace) -}}
- namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values:
          {{- toYaml $namespaces | nindent 10 }}
  podSelector:
    matchLabels:
      {{- toYaml $np.clientPodLabels | nindent 6 }}
{{- with $np.clientsFrom }}
{{ toYaml . }}
{{- end }}
{{- end -}}
