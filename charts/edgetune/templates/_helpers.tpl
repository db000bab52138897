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

{{/* The agent container's securityContext: uid 0 with every capability dropped where it writes the
     host's clock files (root-owned, chart README "Privileges"), else the non-root one. */}}
{{- define "edgetune.agentContainerSecurityContext" -}}
{{- $v := .Values.agent -}}
{{- if $v.hostAccess.enabled -}}
runAsNonRoot: false
runAsUser: 0
runAsGroup: 0
privileged: {{ $v.privileged }}
allowPrivilegeEscalation: {{ $v.privileged }}
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
  {{- with $v.capabilities }}
  add:
    {{- toYaml . | nindent 4 }}
  {{- end }}
seccompProfile:
  type: RuntimeDefault
{{- else -}}
{{- include "edgetune.containerSecurityContext" . }}
{{- end -}}
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

{{/* Bundled Redis: the Secret holding the ACL users' passwords and the aclfile. */}}
{{- define "edgetune.redisAuthSecretName" -}}
{{- .Values.redis.auth.existingSecret | default (printf "%s-auth" (include "edgetune.redisName" .)) -}}
{{- end -}}

{{/* The bundled Redis' ACL user of a component (edgetune.store.acl); "" for one without (the agent). */}}
{{- define "edgetune.redisUser" -}}
{{- if has .component (list "coordinator" "estimator" "optimizer") -}}{{ .component }}{{- end -}}
{{- end -}}

{{/* The aclfile of the bundled Redis: the same users and rules as edgetune.store.acl.acl_file (a test
     compares them), passwords as their SHA-256. (dict "passwords" (dict "coordinator" PW ...)) */}}
{{- define "edgetune.redisAclFile" -}}
{{- $ns := "edgetune" -}}
{{- $conn := "+ping +client|setname +client|getname +client|id +hello +auth +select +echo +time +multi +exec +discard +unwatch" -}}
{{- $audit := printf "(~%s:audit +xadd)" $ns -}}
user default off resetkeys resetchannels -@all
user coordinator on #{{ .passwords.coordinator | sha256sum }} ~{{ $ns }}:* resetchannels -@all +@all -@dangerous -@admin +info
user estimator on #{{ .passwords.estimator | sha256sum }} resetkeys resetchannels -@all {{ $conn }} (~{{ $ns }}:blob:estimator-model:* ~{{ $ns }}:blob-latest:estimator-model:* ~{{ $ns }}:blob-index:estimator-model +@read +@write +@scripting -@dangerous) (%R~{{ $ns }}:meas:* %R~{{ $ns }}:meas-index:* +@read -@dangerous) {{ $audit }}
user optimizer on #{{ .passwords.optimizer | sha256sum }} resetkeys resetchannels -@all {{ $conn }} (~{{ $ns }}:doc:optimizer-session:* ~{{ $ns }}:doc-index:optimizer-session ~{{ $ns }}:doc-rev ~{{ $ns }}:kv:owner:optimizer-session:* +@read +@write +watch -@dangerous) {{ $audit }}
user probe on #{{ .passwords.probe | sha256sum }} resetkeys resetchannels -@all +ping +hello +auth
{{ end -}}

{{/* A password of the bundled Redis: kept from the live Secret on upgrade, else generated. (dict "root" $ "key" K) */}}
{{- define "edgetune.redisPassword" -}}
{{- $name := printf "%s-auth" (include "edgetune.redisName" .root) -}}
{{- $live := lookup "v1" "Secret" .root.Release.Namespace $name -}}
{{- if and $live $live.data (index $live.data .key) -}}
{{- index $live.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 40 -}}
{{- end -}}
{{- end -}}

{{/* EDGETUNE_REDIS of a component (dict "root" $ "component" C). Agents: none (they hold no store
     credential: their node's jobs come through the coordinator). Bundled: the component's ACL user,
     its password from the Secret (Kubernetes expands $(VAR)), TLS when the chart has certificates;
     external: the URL Secret. */}}
{{- define "edgetune.redisEnv" -}}
{{- $root := .root -}}
{{- if eq .component "agent" -}}
- name: EDGETUNE_REDIS
  value: "none"
{{- else if $root.Values.redis.enabled -}}
{{- $host := printf "%s.%s.svc:%d" (include "edgetune.redisName" $root) $root.Release.Namespace (int $root.Values.redis.port) -}}
{{- $user := include "edgetune.redisUser" . -}}
{{- $tls := ne (include "edgetune.tlsMode" $root) "none" -}}
- name: EDGETUNE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "edgetune.redisAuthSecretName" $root }}
      key: {{ $user }}-password
- name: EDGETUNE_REDIS
  value: {{ printf "%s://%s:$(EDGETUNE_REDIS_PASSWORD)@%s/%d%s" (ternary "rediss" "redis" $tls) $user $host (int $root.Values.redis.database) (ternary "?ssl_ca_certs=/etc/edgetune/tls/ca.crt" "" $tls) | quote }}
{{- else -}}
- name: EDGETUNE_REDIS
  valueFrom:
    secretKeyRef:
      name: {{ include "edgetune.redisUrlSecretName" $root }}
      key: {{ include "edgetune.redisUrlSecretKey" $root }}
{{- end -}}
{{- end -}}

{{/* ---------------------------------------------------------------- env ------------ */}}

{{/* Env every service gets: port, metrics port, log level, the Redis URL, the pod's identity.
     (dict "root" $ "component" C "port" 50051 "metricsPort" 9090) */}}
{{- define "edgetune.commonEnv" -}}
- name: EDGETUNE_HOST
  value: "0.0.0.0"
- name: EDGETUNE_PORT
  value: {{ .port | quote }}
- name: EDGETUNE_METRICS_PORT
  value: {{ .metricsPort | quote }}
- name: EDGETUNE_LOG_LEVEL
  value: {{ .root.Values.logLevel | quote }}
{{ include "edgetune.redisEnv" (dict "root" .root "component" .component) }}
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

{{/* The agents' certificate: their own (valid for the agents' Service only), so no agent holds the
     control plane's key. */}}
{{- define "edgetune.agentTlsSecretName" -}}
{{- if eq (include "edgetune.tlsMode" .) "secret" -}}
{{- .Values.security.tls.agentExistingSecret | default (include "edgetune.tlsSecretName" .) -}}
{{- else -}}
{{- include "edgetune.fullname" . }}-agent-tls
{{- end -}}
{{- end -}}

{{/* A component's certificate Secret (dict "root" $ "component" C). */}}
{{- define "edgetune.componentTlsSecretName" -}}
{{- if eq .component "agent" -}}
{{- include "edgetune.agentTlsSecretName" .root -}}
{{- else -}}
{{- include "edgetune.tlsSecretName" .root -}}
{{- end -}}
{{- end -}}

{{/* The names the control plane's certificate carries: its Services (Redis too), short and qualified. */}}
{{- define "edgetune.tlsDnsNames" -}}
{{- range $c := list "coordinator" "estimator" "optimizer" "redis" }}
{{- $n := include "edgetune.componentName" (dict "root" $ "component" $c) }}
- {{ $n }}
- {{ $n }}.{{ $.Release.Namespace }}
- {{ $n }}.{{ $.Release.Namespace }}.svc
- {{ $n }}.{{ $.Release.Namespace }}.svc.cluster.local
{{- end }}
{{- end -}}

{{- define "edgetune.agentTlsDnsNames" -}}
{{- $n := include "edgetune.componentName" (dict "root" . "component" "agent") }}
- {{ $n }}
- {{ $n }}.{{ .Release.Namespace }}
- {{ $n }}.{{ .Release.Namespace }}.svc
- {{ $n }}.{{ .Release.Namespace }}.svc.cluster.local
{{- end -}}

{{/* The Secret of the token file (the user's, or the one the chart generates). */}}
{{- define "edgetune.tokensSecretName" -}}
{{- .Values.security.tokens.existingSecret | default (printf "%s-tokens" (include "edgetune.fullname" .)) -}}
{{- end -}}

{{/* A token of the generated tokens Secret: kept from the live Secret on upgrade, else generated. (dict "root" $ "key" K) */}}
{{- define "edgetune.generatedToken" -}}
{{- $live := lookup "v1" "Secret" .root.Release.Namespace (printf "%s-tokens" (include "edgetune.fullname" .root)) -}}
{{- if and $live $live.data (index $live.data .key) -}}
{{- index $live.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 48 -}}
{{- end -}}
{{- end -}}

{{/* TLS, tokens, identities, the health port, --insecure: env of a service container (dict "root" $ "component" NAME). */}}
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
# People and the coordinator by bearer tokens; a copy of the token file only its owner reads (the
# services refuse one group or others may read), made by the auth-files init container.
- name: EDGETUNE_AUTH_TOKENS
  value: /etc/edgetune/auth/{{ $s.tokens.fileKey }}
{{- if eq .component "agent" }}
# An agent keeps nothing replayable: only sha256: digests in its token file ...
- name: EDGETUNE_HASHED_TOKENS_ONLY
  value: "true"
# ... and it is its node by its pod's projected service-account token.
- name: EDGETUNE_TOKEN_FILE
  value: /var/run/secrets/edgetune/token
{{- end }}
{{- if eq .component "coordinator" }}
{{- with $s.tokens.coordinatorTokenKey }}
- name: EDGETUNE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "edgetune.tokensSecretName" $root }}
      key: {{ . }}
{{- end }}
{{- if $root.Values.agent.enabled }}
# Agents are their nodes: their projected tokens verified with the issuer's keys.
- name: EDGETUNE_AGENT_JWKS
  value: {{ ternary "/etc/edgetune/jwks/jwks.json" "kubernetes" (ne $s.agentIdentity.jwksSecret "") | quote }}
- name: EDGETUNE_AGENT_SERVICE_ACCOUNT
  value: {{ printf "%s:%s" $root.Release.Namespace (include "edgetune.serviceAccountName" (dict "root" $root "component" "agent" "sa" $root.Values.agent.serviceAccount)) | quote }}
{{- with $s.agentIdentity.issuer }}
- name: EDGETUNE_AGENT_ISSUER
  value: {{ . | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if $s.insecure }}
- name: EDGETUNE_INSECURE
  value: "true"
{{- end }}
{{- end -}}

{{- define "edgetune.securityVolumeMounts" -}}
{{- if ne (include "edgetune.tlsMode" .root) "none" }}
- name: tls
  mountPath: /etc/edgetune/tls
  readOnly: true
{{- end }}
- name: auth
  mountPath: /etc/edgetune/auth
  readOnly: true
{{- if eq .component "agent" }}
- name: agent-identity
  mountPath: /var/run/secrets/edgetune
  readOnly: true
{{- end }}
{{- if and (eq .component "coordinator") .root.Values.security.agentIdentity.jwksSecret }}
- name: agent-jwks
  mountPath: /etc/edgetune/jwks
  readOnly: true
{{- end }}
{{- end -}}

{{/* (dict "root" $ "component" C) */}}
{{- define "edgetune.securityVolumes" -}}
{{- $root := .root -}}
{{- if ne (include "edgetune.tlsMode" $root) "none" }}
- name: tls
  secret:
    secretName: {{ include "edgetune.componentTlsSecretName" . }}
{{- end }}
# Only the token file; the auth-files init container copies it, mode 0600, into "auth".
- name: auth-src
  secret:
    secretName: {{ include "edgetune.tokensSecretName" $root }}
    defaultMode: 0440
    items:
      - key: {{ $root.Values.security.tokens.fileKey }}
        path: {{ $root.Values.security.tokens.fileKey }}
- name: auth
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- if eq .component "agent" }}
# The agent's identity: a token for the audience edgetune only (useless against the API server),
# naming the pod's node; the kubelet renews it.
- name: agent-identity
  projected:
    defaultMode: 0400
    sources:
      - serviceAccountToken:
          audience: {{ $root.Values.security.agentIdentity.audience }}
          expirationSeconds: {{ int $root.Values.security.agentIdentity.expirationSeconds }}
          path: token
{{- end }}
{{- if and (eq .component "coordinator") $root.Values.security.agentIdentity.jwksSecret }}
- name: agent-jwks
  secret:
    secretName: {{ $root.Values.security.agentIdentity.jwksSecret }}
    items:
      - key: jwks.json
        path: jwks.json
{{- end }}
{{- end -}}

{{/* The init container that copies the token file with mode 0600 (a Secret volume under fsGroup is
     group-readable, which the services refuse). (dict "root" $ "image" IMAGE "pullPolicy" P "securityContext" YAML) */}}
{{- define "edgetune.authInitContainer" -}}
- name: auth-files
  image: {{ .image | quote }}
  imagePullPolicy: {{ .pullPolicy }}
  command: ["sh", "-c", "umask 077 && cp /etc/edgetune/auth-src/{{ .root.Values.security.tokens.fileKey }} /etc/edgetune/auth/{{ .root.Values.security.tokens.fileKey }}"]
  resources:
    requests:
      cpu: 10m
      memory: 16Mi
    limits:
      cpu: 100m
      memory: 32Mi
  securityContext:
    {{- .securityContext | nindent 4 }}
  volumeMounts:
    - name: auth-src
      mountPath: /etc/edgetune/auth-src
      readOnly: true
    - name: auth
      mountPath: /etc/edgetune/auth
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
