{{/*
The pod spec of a Ray node (head or worker), for KubeRay (the operator writes the command)
or for the plain Deployments (`ray start` here).
  (dict "root" $ "group" .Values.ray.head "sa" NAME "image" IMG "pullPolicy" P
        "containerName" "ray-head" "kuberay" BOOL "role" "head"|"worker" "headAddress" "host:port")
*/}}
{{- define "edgetune.rayPodSpec" -}}
{{- $v := .root.Values.ray -}}
serviceAccountName: {{ .sa }}
automountServiceAccountToken: false
{{- with include "edgetune.imagePullSecrets" .root }}{{ . | nindent 0 }}{{- end }}
securityContext:
  {{- include "edgetune.podSecurityContext" .root | nindent 2 }}
{{- with .group.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .group.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .group.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: {{ .containerName }}
    image: {{ .image | quote }}
    imagePullPolicy: {{ .pullPolicy }}
    {{- if not .kuberay }}
    command: ["ray", "start"]
    args:
      - --block
      - --disable-usage-stats
      - --node-manager-port=6380
      - --object-manager-port=6381
      - --metrics-export-port={{ $v.metricsPort }}
      {{- if eq .role "head" }}
      - --head
      - --port={{ $v.gcsPort }}
      - --ray-client-server-port={{ $v.clientPort }}
      - --dashboard-host=0.0.0.0
      - --dashboard-port={{ $v.dashboardPort }}
      - --num-cpus={{ .group.numCpus }}
      {{- else }}
      - --address={{ .headAddress }}
      {{- end }}
    {{- end }}
    env:
      - name: HOME
        value: /tmp
      - name: RAY_USAGE_STATS_ENABLED
        value: "0"
    ports:
      {{- if or .kuberay (eq .role "head") }}
      {{- if or (not .kuberay) (eq .containerName "ray-head") }}
      - name: gcs
        containerPort: {{ $v.gcsPort }}
        protocol: TCP
      - name: client
        containerPort: {{ $v.clientPort }}
        protocol: TCP
      - name: dashboard
        containerPort: {{ $v.dashboardPort }}
        protocol: TCP
      {{- end }}
      {{- end }}
      - name: metrics
        containerPort: {{ $v.metricsPort }}
        protocol: TCP
    {{- if not .kuberay }}
    {{- /* KubeRay injects its own probes. */}}
    readinessProbe:
      tcpSocket:
        port: {{ if eq .role "head" }}{{ $v.gcsPort }}{{ else }}6380{{ end }}
      initialDelaySeconds: 10
      periodSeconds: 10
    livenessProbe:
      tcpSocket:
        port: {{ if eq .role "head" }}{{ $v.gcsPort }}{{ else }}6380{{ end }}
      initialDelaySeconds: 30
      periodSeconds: 20
      failureThreshold: 5
    {{- end }}
    resources:
      {{- toYaml .group.resources | nindent 6 }}
    securityContext:
      {{- include "edgetune.containerSecurityContext" .root | nindent 6 }}
    volumeMounts:
      - name: tmp
        mountPath: /tmp
      - name: shm
        mountPath: /dev/shm
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 1Gi
  - name: shm
    emptyDir:
      medium: Memory
      sizeLimit: {{ .group.shmSize }}
{{- end -}}
