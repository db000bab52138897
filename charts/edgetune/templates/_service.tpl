{{/*
A control-plane service (estimator, optimizer, coordinator): Deployment + ClusterIP Service.
  (dict "root" $ "component" "estimator" "extraEnv" (list ...) "startupFailures" 36)
*/}}
{{- define "edgetune.serviceWorkload" -}}
{{- $root := .root -}}
{{- $name := .component -}}
{{- $v := index $root.Values $name -}}
{{- $ctx := dict "root" $root "component" $name -}}
{{- $fullname := include "edgetune.componentName" $ctx -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "edgetune.componentLabels" $ctx | nindent 4 }}
spec:
  replicas: {{ $v.replicas }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "edgetune.componentSelectorLabels" $ctx | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: {{ if gt (int $v.replicas) 1 }}1{{ else }}0{{ end }}
      maxSurge: 1
  template:
    metadata:
      labels:
        {{- include "edgetune.componentLabels" $ctx | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- $ann := merge (dict) ($v.podAnnotations | default dict) (include "edgetune.metricsAnnotations" (dict "root" $root "port" $v.metricsPort) | fromYaml) }}
      {{- with $ann }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "edgetune.serviceAccountName" (dict "root" $root "component" $name "sa" $v.serviceAccount) }}
      automountServiceAccountToken: {{ .automountToken | default false }}
      {{- with include "edgetune.imagePullSecrets" $root }}{{ . | nindent 6 }}{{- end }}
      {{- with $v.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- include "edgetune.podSecurityContext" $root | nindent 8 }}
      terminationGracePeriodSeconds: 30
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if and .spread (gt (int $v.replicas) 1) }}
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: kubernetes.io/hostname
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "edgetune.componentSelectorLabels" $ctx | nindent 14 }}
      {{- end }}
      initContainers:
        {{- include "edgetune.authInitContainer" (dict "root" $root "image" (include "edgetune.image" (dict "root" $root "image" $v.image)) "pullPolicy" (include "edgetune.pullPolicy" (dict "root" $root "image" $v.image)) "securityContext" (include "edgetune.containerSecurityContext" $root)) | nindent 8 }}
      containers:
        - name: {{ $name }}
          image: {{ include "edgetune.image" (dict "root" $root "image" $v.image) | quote }}
          imagePullPolicy: {{ include "edgetune.pullPolicy" (dict "root" $root "image" $v.image) }}
          command: ["edgetune", "serve"]
          args:
            - {{ $name }}
            {{- with $v.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: grpc
              containerPort: {{ $v.port }}
              protocol: TCP
            - name: metrics
              containerPort: {{ $v.metricsPort }}
              protocol: TCP
          env:
            {{- include "edgetune.commonEnv" (dict "root" $root "component" $name "port" $v.port "metricsPort" $v.metricsPort) | nindent 12 }}
            {{- include "edgetune.securityEnv" $ctx | nindent 12 }}
            {{- with .extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- include "edgetune.grpcProbes" (dict "port" $root.Values.security.healthPort "startupFailures" .startupFailures) | nindent 10 }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- include "edgetune.containerSecurityContext" $root | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            {{- include "edgetune.securityVolumeMounts" $ctx | nindent 12 }}
      volumes:
        - name: tmp
          emptyDir:
            sizeLimit: 256Mi
        {{- include "edgetune.securityVolumes" $ctx | nindent 8 }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $fullname }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "edgetune.componentLabels" $ctx | nindent 4 }}
  {{- $svcAnn := merge (dict) ($v.service.annotations | default dict) (include "edgetune.metricsAnnotations" (dict "root" $root "port" $v.metricsPort) | fromYaml) }}
  {{- with $svcAnn }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ $v.service.type }}
  selector:
    {{- include "edgetune.componentSelectorLabels" $ctx | nindent 4 }}
  ports:
    - name: grpc
      port: {{ $v.port }}
      targetPort: grpc
      protocol: TCP
      appProtocol: grpc
    - name: metrics
      port: {{ $v.metricsPort }}
      targetPort: metrics
      protocol: TCP
      appProtocol: http
{{- end -}}
