{{/* Egress ports ----------------------------------------------------------------------------------- */}}

{{/*
The TCP ports one URL reaches, comma-separated: each host's explicit port (a PostgreSQL URL may name
several hosts, pg-a:5432,pg-b:5433), else `default`, else the scheme's. "" for a value that is not a URL
with a scheme (a whole `${NAME}`: the chart cannot see it). Parsed with regular expressions, not urlParse,
which fails the render on a `${NAME}` inside the URL.
Input: dict "url" <string> "default" <port or "">.
*/}}
{{- define "llm-gateway.urlPorts" -}}
{{- $url := trim (toString (default "" .url)) }}
{{- $schemeRe := "^[A-Za-z][A-Za-z0-9+.-]*://" }}
{{- if regexMatch $schemeRe $url }}
{{- $defaults := dict "http" "80" "https" "443" "redis" "6379" "rediss" "6379" "postgres" "5432" "postgresql" "5432" }}
{{- $scheme := lower (regexFind "^[A-Za-z][A-Za-z0-9+.-]*" $url) }}
{{- $fallback := toString (default (get $defaults $scheme) .default) }}
{{- $authority := regexFind "^[^/?#]*" (regexReplaceAll $schemeRe $url "") }}
{{- /* the userinfo ends at the last "@" (a password's own "@" is percent-encoded) */}}
{{- $hosts := regexReplaceAll "^.*@" $authority "" }}
{{- $ports := list }}
{{- range splitList "," $hosts }}
{{- $port := trimPrefix ":" (regexFind ":[0-9]+$" .) | default $fallback }}
{{- if $port }}{{ $ports = append $ports $port }}{{ end }}
{{- end }}
{{- join "," $ports }}
{{- end }}
{{- end }}

{{/* Environment variables holding a URL the gateway connects to (a proxy, the OTLP collector). */}}
{{- define "llm-gateway.urlEnvNames" -}}
HTTPS_PROXY https_proxy HTTP_PROXY http_proxy OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT OTEL_EXPORTER_OTLP_METRICS_ENDPOINT
{{- end }}

{{/*
The URLs of the effective gateway config the pods connect to, as a YAML list of {url, default} (default:
the port of a host without one, "" for the scheme's): providers' base_url and proxy, guardrail webhooks, the IdP's
issuer and jwks_url, the OTLP collector, Redis and its Sentinels, PostgreSQL; then the proxy and OTLP
variables of `extraEnv` and `secret.env`. With `existingConfigMap` the chart cannot see the config: only
the chart's own `redis` and `store` values count.
*/}}
{{- define "llm-gateway.egressUrls" -}}
{{- $cfg := dict }}
{{- if not .Values.existingConfigMap }}{{ $cfg = include "llm-gateway.configYaml" . | fromYaml }}{{ end }}
{{- range $name, $p := (default dict $cfg.providers) }}
{{- if kindIs "map" $p }}
- {url: {{ $p.base_url | default "" | toString | toJson }}}
{{- if kindIs "string" $p.proxy }}
- {url: {{ $p.proxy | toJson }}}
{{- end }}
{{- end }}
{{- end }}
{{- range (default list $cfg.guardrails) }}
- {url: {{ .url | default "" | toString | toJson }}}
{{- end }}
{{- with (default dict (default dict $cfg.auth).jwt) }}
- {url: {{ .issuer | default "" | toString | toJson }}}
- {url: {{ .jwks_url | default "" | toString | toJson }}}
{{- end }}
- {url: {{ (default dict $cfg.telemetry).otlp_endpoint | default "" | toString | toJson }}}
{{- /* the chart's own redis.url and store.url also with existingConfigMap (its env still carries them) */}}
{{- $state := default dict $cfg.state }}
{{- $sentinels := list }}
{{- if eq (toString $state.backend) "redis" }}
- {url: {{ $state.redis_url | default "" | toString | toJson }}}
{{- $sentinels = default list (default dict $state.sentinel).urls }}
{{- end }}
{{- if and (include "llm-gateway.redisEnabled" .) (eq (toString .Values.redis.mode) "sentinel") }}{{ $sentinels = concat $sentinels .Values.redis.sentinel.urls }}{{ end }}
{{- range $sentinels }}
- {url: {{ . | toString | toJson }}, default: "26379"}
{{- end }}
- {url: {{ .Values.redis.url | toJson }}}
- {url: {{ (default dict $cfg.store).url | default "" | toString | toJson }}}
- {url: {{ .Values.store.url | toJson }}}
{{- $names := splitList " " (include "llm-gateway.urlEnvNames" .) }}
{{- range .Values.extraEnv }}
{{- if and (has .name $names) .value }}
- {url: {{ .value | toString | toJson }}}
{{- end }}
{{- end }}
{{- if not .Values.existingSecret }}
{{- range $k, $v := .Values.secret.env }}
{{- if has $k $names }}
- {url: {{ $v | toString | toJson }}}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Every TCP port the pods connect to besides DNS, as a JSON list of numbers in ascending order: the
`httpsPorts`, Redis's and PostgreSQL's (`redisPort`, `storePort`) while the config uses them, and the
ports of the URLs above (an in-cluster vLLM on :8000, an OTLP collector on :4318, an IdP over http,
Sentinels on :26379).
*/}}
{{- define "llm-gateway.egressPorts" -}}
{{- $np := .Values.networkPolicy.egress }}
{{- $ports := list }}
{{- range $np.httpsPorts }}{{ $ports = append $ports (toString .) }}{{ end }}
{{- $cfg := dict }}
{{- if not .Values.existingConfigMap }}{{ $cfg = include "llm-gateway.configYaml" . | fromYaml }}{{ end }}
{{- if or (include "llm-gateway.redisEnabled" .) (eq (toString (default dict $cfg.state).backend) "redis") }}
{{- $ports = append $ports (toString $np.redisPort) }}
{{- end }}
{{- if or (include "llm-gateway.storeEnabled" .) (default dict $cfg.store).url }}
{{- $ports = append $ports (toString $np.storePort) }}
{{- end }}
{{- range (include "llm-gateway.egressUrls" . | fromYamlArray) }}
{{- with include "llm-gateway.urlPorts" . }}
{{- $ports = concat $ports (splitList "," .) }}
{{- end }}
{{- end }}
{{- include "llm-gateway.portList" $ports }}
{{- end }}

{{/*
PostgreSQL's TCP ports alone, as a JSON list of numbers in ascending order: `storePort` and every host's
port of `store.url`. The migrations Job's hook policy (templates/migrate-job.yaml) opens these and DNS.
*/}}
{{- define "llm-gateway.storePorts" -}}
{{- $ports := list (toString .Values.networkPolicy.egress.storePort) }}
{{- with include "llm-gateway.urlPorts" (dict "url" .Values.store.url) }}
{{- $ports = concat $ports (splitList "," .) }}
{{- end }}
{{- include "llm-gateway.portList" $ports }}
{{- end }}

{{/* A list of port strings as a JSON list of distinct numbers in ascending order. */}}
{{- define "llm-gateway.portList" -}}
{{- /* numeric order: sort the zero-padded strings */}}
{{- $padded := list }}
{{- range uniq . }}{{ $padded = append $padded (printf "%05d" (int .)) }}{{ end }}
{{- $out := list }}
{{- range sortAlpha $padded }}{{ $out = append $out (atoi .) }}{{ end }}
{{- toJson $out }}
{{- end }}

{{/*
True ("true") when a `bedrock` provider takes its credentials from the AWS default chain on the pod
(no static keys in its config, no IRSA role): on EKS with Pod Identity the chain asks the node's agent
(169.254.170.23, port 80), which restricted egress must let through.
*/}}
{{- define "llm-gateway.awsPodIdentity" -}}
{{- if and (not .Values.existingConfigMap) (not (.Values.aws | default dict).irsaRoleArn) }}
{{- $cfg := include "llm-gateway.configYaml" . | fromYaml }}
{{- range $name, $p := (default dict $cfg.providers) }}
{{- if and (kindIs "map" $p) (eq (toString $p.type) "bedrock") (not $p.aws_access_key_id) }}true{{ end }}
{{- end }}
{{- end }}
{{- end }}
