{{/* Secrets in `config` ---------------------------------------------------------------------------- */}}

{{/*
Refuse a credential written literally in `config`: the config is rendered into a ConfigMap, readable by
whoever may read ConfigMaps (and kept in every Helm release record), so a credential belongs in a Secret
and the config refers to it as ${NAME}. Checked: provider keys, AWS secrets, the listener key's
passphrase, client and admin keys, and a password inside a URL (store, Redis, Sentinels, a proxy).
The message names the key, never the value. Input: the effective config as a dict.
*/}}
{{- define "llm-gateway.refuseLiteralSecrets" -}}
{{- $found := list }}
{{- range $name, $p := (default dict .providers) }}
{{- if kindIs "map" $p }}
{{- range $key := list "api_key" "aws_secret_access_key" "aws_session_token" }}
{{- if include "llm-gateway.literal" (index $p $key) }}{{ $found = append $found (printf "providers.%s.%s" $name $key) }}{{ end }}
{{- end }}
{{- if include "llm-gateway.urlPassword" $p.proxy }}{{ $found = append $found (printf "providers.%s.proxy" $name) }}{{ end }}
{{- end }}
{{- end }}
{{- if include "llm-gateway.literal" (dig "tls" "key_password" "" (default dict .server)) }}
{{- $found = append $found "server.tls.key_password" }}
{{- end }}
{{- range $section := list "auth" "admin" }}
{{- range $i, $k := (default list (index (default dict (index $ $section)) "keys")) }}
{{- if and (kindIs "map" $k) (include "llm-gateway.literal" $k.key) }}{{ $found = append $found (printf "%s.keys[%d].key" $section $i) }}{{ end }}
{{- end }}
{{- end }}
{{- $state := default dict .state }}
{{- if include "llm-gateway.urlPassword" $state.redis_url }}{{ $found = append $found "state.redis_url" }}{{ end }}
{{- range $i, $u := (default list (default dict $state.sentinel).urls) }}
{{- if include "llm-gateway.urlPassword" $u }}{{ $found = append $found (printf "state.sentinel.urls[%d]" $i) }}{{ end }}
{{- end }}
{{- if include "llm-gateway.urlPassword" (default dict .store).url }}{{ $found = append $found "store.url" }}{{ end }}
{{- with $found }}
{{- fail (printf "config.%s: a literal credential would be stored in the ConfigMap; write it as ${NAME} and put NAME in secret.env or existingSecret (the store's URL: store.url or store.existingSecret; Redis's: redis.url or redis.existingSecret)" (join ", config." .)) }}
{{- end }}
{{- end }}

{{/* "true" for a non-empty string that is not, or does not use, a ${NAME} reference. */}}
{{- define "llm-gateway.literal" -}}
{{- if and (kindIs "string" .) . (not (contains "${" .)) }}true{{ end }}
{{- end }}

{{/* "true" for a URL whose userinfo carries a literal password (scheme://user:password@host). */}}
{{- define "llm-gateway.urlPassword" -}}
{{- if kindIs "string" . }}
{{- $userinfo := trimSuffix "@" (regexReplaceAll "^[A-Za-z][A-Za-z0-9+.-]*://" (regexFind "^[A-Za-z][A-Za-z0-9+.-]*://[^/?#@]*@" .) "") }}
{{- if contains ":" $userinfo }}
{{- include "llm-gateway.literal" (regexReplaceAll "^[^:]*:" $userinfo "") }}
{{- end }}
{{- end }}
{{- end }}
