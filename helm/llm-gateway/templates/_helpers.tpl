{{/* Names ---------------------------------------------------------------------------------------- */}}

{{- define "llm-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-qualified name; the release name alone when it already contains the chart name. */}}
{{- define "llm-gateway.fullname" -}}
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

{{- define "llm-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "llm-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llm-gateway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- /* The migrations Job's pods: not the gateway's selector labels, so the Service, the PodDisruptionBudget,
the HPA's pod metrics and the gateway pods' NetworkPolicy never count or select them. */}}
{{- define "llm-gateway.migrateLabels" -}}
app.kubernetes.io/name: {{ include "llm-gateway.name" . }}-migrate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: migrate
{{- end }}

{{- define "llm-gateway.labels" -}}
helm.sh/chart: {{ include "llm-gateway.chart" . }}
{{ include "llm-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: llm-gateway
{{- end }}

{{- define "llm-gateway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "llm-gateway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "llm-gateway.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Gateway config -------------------------------------------------------------------------------- */}}

{{/* True ("true") when the release stores shared state in Redis. */}}
{{- define "llm-gateway.redisEnabled" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret }}true{{ end }}
{{- end }}

{{/*
`config.state` for a release with Redis (docs/scale-out.md): the URL from the Secret, the mode, and
`replicas` from the pods that share the limits (the HPA's minimum, or replicaCount), so that while Redis
is away each pod admits limit / (replicas x workers).
*/}}
{{- define "llm-gateway.redisState" -}}
backend: redis
redis_url: ${REDIS_URL}
redis_mode: {{ .Values.redis.mode | default "single" }}
timeout_ms: {{ int (.Values.redis.timeoutMs | default 50) }}
replicas: {{ int (ternary .Values.autoscaling.minReplicas .Values.replicaCount .Values.autoscaling.enabled) }}
{{- if .Values.redis.caSecret }}
redis_ca_file: /etc/llm-gateway/redis-ca/{{ .Values.redis.caSecretKey }}
{{- end }}
{{- if eq (.Values.redis.mode | default "single") "sentinel" }}
sentinel:
  master: {{ required "redis.sentinel.master is required with redis.mode sentinel" .Values.redis.sentinel.master | quote }}
  urls: {{ required "redis.sentinel.urls is required with redis.mode sentinel" .Values.redis.sentinel.urls | toJson }}
{{- end }}
{{- end }}

{{/*
The effective gateway config as a dict: values.config, with state pointed at ${REDIS_URL} when
redis is configured, so the URL (which may hold a password) lives in a Secret, not in the ConfigMap;
likewise store.url at ${GATEWAY_STORE_URL}, and admin.existingSecret's key added to admin.keys.
*/}}
{{- define "llm-gateway.configYaml" -}}
{{- $cfg := deepCopy .Values.config }}
{{- if include "llm-gateway.redisEnabled" . }}
{{- $_ := set $cfg "state" (include "llm-gateway.redisState" . | fromYaml) }}
{{- end }}
{{- if include "llm-gateway.storeEnabled" . }}
{{- $_ := set $cfg "store" (merge (dict "url" "${GATEWAY_STORE_URL}") (default dict $cfg.store)) }}
{{- $_ := set $cfg.store "url" "${GATEWAY_STORE_URL}" }}
{{- end }}
{{- if .Values.admin.existingSecret }}
{{- /* appended to config.admin.keys: jwt_groups, console and the keys given there (with their roles) stay */}}
{{- $admin := default dict $cfg.admin }}
{{- $keys := default list $admin.keys }}
{{- range $keys }}
{{- if eq (toString .name) (toString $.Values.admin.name) }}
{{- fail (printf "admin.name %q is also the name of a key in config.admin.keys: give admin.name another" $.Values.admin.name) }}
{{- end }}
{{- end }}
{{- $_ := set $admin "keys" (append $keys (dict "name" .Values.admin.name "key" "${GATEWAY_ADMIN_KEY}")) }}
{{- $_ := set $cfg "admin" $admin }}
{{- end }}
{{- include "llm-gateway.refuseLiteralSecrets" $cfg }}
{{- $server := default dict $cfg.server }}
{{- if has (toString (default "127.0.0.1" $server.host)) (list "127.0.0.1" "localhost" "::1") }}
{{- fail "config.server.host must not be a loopback address inside a pod: use 0.0.0.0 (or ::)" }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}

{{- define "llm-gateway.apiPort" -}}
{{- $server := default dict .Values.config.server }}
{{- if hasKey $server "port" }}{{ int $server.port }}{{ else }}8080{{ end }}
{{- end }}

{{/* True ("true") when the API listener serves TLS (config.server.tls, docs/reference.md): the probes
then speak HTTPS (the kubelet does not verify the certificate). */}}
{{- define "llm-gateway.apiTls" -}}
{{- if (default dict .Values.config.server).tls }}true{{ end }}
{{- end }}

{{- define "llm-gateway.metricsPort" -}}
{{- $server := default dict .Values.config.server }}
{{- if hasKey $server "metrics_port" }}{{ int $server.metrics_port }}{{ else }}9464{{ end }}
{{- end }}

{{/* Whole seconds the gateway may spend draining streams after SIGTERM (server.drain_s, default 30). */}}
{{- define "llm-gateway.drainSeconds" -}}
{{- $server := default dict .Values.config.server }}
{{- if hasKey $server "drain_s" }}{{ int (ceil $server.drain_s) }}{{ else }}30{{ end }}
{{- end }}

{{/* preStop sleep + drain + a margin for the process to exit after the last stream closes. */}}
{{- define "llm-gateway.terminationGracePeriodSeconds" -}}
{{- $needed := add (int .Values.preStopSleepSeconds) (int (include "llm-gateway.drainSeconds" .)) }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $needed 15 }}
{{- else }}
{{- if le (int .Values.terminationGracePeriodSeconds) $needed }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed preStopSleepSeconds + config.server.drain_s (%d), or open streams are cut off" (int .Values.terminationGracePeriodSeconds) $needed) }}
{{- end }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* Secrets ---------------------------------------------------------------------------------------- */}}

{{/* True when the chart renders its own Secret (provider/gateway keys and/or REDIS_URL). */}}
{{- define "llm-gateway.createSecret" -}}
{{- if or (and .Values.secret.create (not .Values.existingSecret)) .Values.redis.url .Values.store.url }}true{{ end }}
{{- end }}

{{/* True ("true") when the release keeps the control plane's store in PostgreSQL. */}}
{{- define "llm-gateway.storeEnabled" -}}
{{- if or .Values.store.url .Values.store.existingSecret }}true{{ end }}
{{- end }}

{{/* True ("true") when `gateway migrate` runs as a hook Job (templates/migrate-job.yaml). */}}
{{- define "llm-gateway.migrationsJob" -}}
{{- if and (include "llm-gateway.storeEnabled" .) .Values.store.migrationsJob (not .Values.existingConfigMap) }}true{{ end }}
{{- end }}

{{/* The environment the gateway's config refers to (the pods' and the migrations Job's). */}}
{{- define "llm-gateway.env" -}}
- name: TMPDIR
  value: /tmp
{{- if .Values.redis.existingSecret }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.existingSecretKey }}
{{- end }}
{{- if .Values.store.existingSecret }}
- name: GATEWAY_STORE_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.store.existingSecret }}
      key: {{ .Values.store.existingSecretKey }}
{{- end }}
{{- if .Values.admin.existingSecret }}
- name: GATEWAY_ADMIN_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.admin.existingSecret }}
      key: {{ .Values.admin.existingSecretKey }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* True when the chart generates GATEWAY_API_KEY: the config uses it and nobody provides it. */}}
{{- define "llm-gateway.generateKey" -}}
{{- if and (include "llm-gateway.keyMissing" .) .Values.secret.create .Values.secret.generateGatewayKey }}true{{ end }}
{{- end }}

{{/* True when the config uses ${GATEWAY_API_KEY} and no value the chart can see provides it. */}}
{{- define "llm-gateway.keyMissing" -}}
{{- $inExtraEnv := false }}
{{- range .Values.extraEnv }}{{ if eq .name "GATEWAY_API_KEY" }}{{ $inExtraEnv = true }}{{ end }}{{ end }}
{{- if and (not .Values.existingConfigMap) (not .Values.existingSecret) (not .Values.extraEnvFrom) (not $inExtraEnv) (not (hasKey .Values.secret.env "GATEWAY_API_KEY")) (contains "${GATEWAY_API_KEY}" (include "llm-gateway.configYaml" .)) }}true{{ end }}
{{- end }}

{{/* A gateway key nobody set and nobody generates: refuse to render, rather than a pod that cannot start
or a key that changes on every `helm template`. */}}
{{- define "llm-gateway.requireKey" -}}
{{- if and (include "llm-gateway.keyMissing" .) (not (include "llm-gateway.generateKey" .)) }}
{{- fail "config uses ${GATEWAY_API_KEY}: set secret.env.GATEWAY_API_KEY (e.g. --set secret.env.GATEWAY_API_KEY=$(openssl rand -hex 24)) or existingSecret; or set secret.generateGatewayKey=true to have helm install generate one (kept across upgrades, but not stable under helm template)" }}
{{- end }}
{{- end }}

{{- define "llm-gateway.secretName" -}}
{{- include "llm-gateway.fullname" . }}
{{- end }}

{{/*
The TTFT SLO threshold rule (model:llm_gateway_ttft_slo_threshold:le): each model's threshold as the
`le` bound of its TTFT bucket. One line per `thresholds` entry (a regex on `model`, first match wins),
then the default for every other model. Bounds are printed without a trailing ".0", as the rule joins
them against `le` normalized that way.
*/}}
{{- define "llm-gateway.ttftSloThresholds" -}}
{{- $count := "llm_gateway_time_to_first_token_seconds_count" -}}
{{- range .thresholds -}}
label_replace(group by (model) ({{ $count }}{model=~{{ .models | quote }}}), "le", "{{ .seconds }}", "", "")
or on (model)
{{ end -}}
label_replace(group by (model) ({{ $count }}), "le", "{{ .defaultThresholdSeconds }}", "", "")
{{ end -}}

{{/*
The service account's annotations: the user's, and IRSA's for `aws.irsaRoleArn` (bedrock providers on EKS).
*/}}
{{- define "llm-gateway.serviceAccountAnnotations" -}}
{{- $annotations := deepCopy (.Values.serviceAccount.annotations | default dict) }}
{{- with (.Values.aws | default dict).irsaRoleArn }}
{{- $_ := set $annotations "eks.amazonaws.com/role-arn" . }}
{{- if $.Values.aws.stsRegionalEndpoints }}
{{- $_ := set $annotations "eks.amazonaws.com/sts-regional-endpoints" "true" }}
{{- end }}
{{- end }}
{{- with .Values.serviceAccount.gcpServiceAccount }}
{{- $_ := set $annotations "iam.gke.io/gcp-service-account" . }}
{{- end }}
{{- toYaml $annotations }}
{{- end }}
