{{/*
Shared names, labels and the rendered config file. Everything here is pure: values in, text out.
*/}}

{{- define "llm-extproc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-llm-extproc" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "llm-extproc.selectorLabels" -}}
app.kubernetes.io/name: llm-extproc
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "llm-extproc.labels" -}}
{{ include "llm-extproc.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "llm-extproc.serviceAccountName" -}}
{{- $sa := .Values.serviceAccount | default dict -}}
{{- if .Values.gateway.envoyGateway.sidecar.enabled -}}
{{- required "gateway.envoyGateway.sidecar.envoyServiceAccount: the Envoy pods' service account (the sidecar reads the API server with it)" .Values.gateway.envoyGateway.sidecar.envoyServiceAccount -}}
{{- else -}}
{{- $sa.name | default ((hasKey $sa "create" | ternary $sa.create true) | ternary (include "llm-extproc.fullname" .) "default") -}}
{{- end -}}
{{- end -}}

{{- define "llm-extproc.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Where the config, the static endpoints file and TLS files are mounted in the container. */}}
{{- define "llm-extproc.configDir" -}}/etc/llm-extproc{{- end -}}
{{- define "llm-extproc.socketDir" -}}/var/run/llm-extproc{{- end -}}

{{/* The InferencePools this release creates are watched by the server, in the release namespace. */}}
{{- define "llm-extproc.inferencePoolsCreated" -}}
{{- and .Values.gateway.inferencePool.enabled (gt (len .Values.gateway.inferencePool.pools) 0) -}}
{{- end -}}

{{/*
llm-extproc's config file: `.Values.config` (validated by values.schema.json, the server's own
schema) plus what the chart owns: the listen addresses (from `ports`, or the Unix socket of the
sidecar mode), TLS files from `tls.secretName`, the static endpoints file from `staticEndpoints`,
and the InferencePools the chart creates.
*/}}
{{- define "llm-extproc.configFile" -}}
{{- $cfg := deepCopy (.Values.config | default dict) -}}
{{- $listen := dict "http" (printf "0.0.0.0:%v" .Values.ports.http) "debugEndpoints" .Values.debugEndpoints -}}
{{- if .Values.gateway.envoyGateway.sidecar.enabled -}}
{{- $_ := set $listen "grpc" (printf "unix://%s/grpc.sock" (include "llm-extproc.socketDir" .)) -}}
{{- else -}}
{{- $_ := set $listen "grpc" (printf "0.0.0.0:%v" .Values.ports.grpc) -}}
{{- end -}}
{{- if .Values.tls.enabled -}}
{{- if .Values.tls.secretName -}}
{{- $tls := dict "enabled" true "certFile" (printf "%s/tls/tls.crt" (include "llm-extproc.configDir" .)) "keyFile" (printf "%s/tls/tls.key" (include "llm-extproc.configDir" .)) -}}
{{- if .Values.tls.clientCaSecretName -}}
{{- $_ := set $tls "clientCaFile" (printf "%s/client-ca/ca.crt" (include "llm-extproc.configDir" .)) -}}
{{- end -}}
{{- $_ := set $listen "tls" $tls -}}
{{- else -}}
{{- /* clientCaSecretName without secretName is refused in validate.yaml. */ -}}
{{- $_ := set $listen "tls" (dict "enabled" true) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $cfg "listen" $listen -}}
{{- $picker := $cfg.picker | default dict -}}
{{- if and (hasKey $picker "precise") (not (hasKey ($picker.precise | default dict) "tokenizerDir")) -}}
{{- if not (or .Values.tokenizer.configMap .Values.tokenizer.volume) -}}
{{- fail "config.picker.precise needs the model's tokenizer files: set tokenizer.configMap or tokenizer.volume (or config.picker.precise.tokenizerDir to a directory the image has)" -}}
{{- end -}}
{{- $_ := set $picker.precise "tokenizerDir" (include "llm-extproc.tokenizerDir" .) -}}
{{- end -}}
{{- if .Values.sessions.keySecretName -}}
{{- $session := $picker.session | default dict -}}
{{- $_ := set $session "keyFile" (printf "%s/session/keys" (include "llm-extproc.configDir" .)) -}}
{{- $_ := set $picker "session" $session -}}
{{- $_ := set $cfg "picker" $picker -}}
{{- end -}}
{{- if .Values.staticEndpoints -}}
{{- /* staticEndpoints with config.kubernetes is refused in validate.yaml. */ -}}
{{- $_ := set $cfg "static" (dict "path" (printf "%s/endpoints.yaml" (include "llm-extproc.configDir" .))) -}}
{{- end -}}
{{- $noSource := and (not .Values.staticEndpoints) (not (hasKey $cfg "kubernetes")) (not (hasKey $cfg "static")) -}}
{{- if or $noSource (eq (include "llm-extproc.inferencePoolsCreated" .) "true") -}}
{{- /* With no source configured, watch the InferencePools of the release namespace. */ -}}
{{- $k8s := $cfg.kubernetes | default dict -}}
{{- $ip := $k8s.inferencePools | default dict -}}
{{- $_ := set $ip "enabled" true -}}
{{- $_ := set $ip "namespaces" (append ($ip.namespaces | default list) .Release.Namespace | uniq) -}}
{{- $_ := set $k8s "inferencePools" $ip -}}
{{- $_ := set $cfg "kubernetes" $k8s -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/* Seconds the pod needs to stop cleanly: drain + grace + margin (the kubelet kills it after this). */}}
{{- define "llm-extproc.terminationGrace" -}}
{{- if .Values.terminationGracePeriodSeconds -}}
{{- .Values.terminationGracePeriodSeconds -}}
{{- else -}}
{{- $drain := .Values.config.shutdownDrainSeconds | default 5 | float64 -}}
{{- $grace := .Values.config.shutdownGraceSeconds | default 20 | float64 -}}
{{- add (ceil (addf $drain $grace)) 10 -}}
{{- end -}}
{{- end -}}

{{/* The container spec, shared by the Deployment and the Envoy Gateway sidecar patch. */}}
{{- define "llm-extproc.container" -}}
name: llm-extproc
image: {{ include "llm-extproc.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args: ["--config", "{{ include "llm-extproc.configDir" . }}/config.yaml"]
ports:
{{- if not .Values.gateway.envoyGateway.sidecar.enabled }}
  - name: grpc
    containerPort: {{ .Values.ports.grpc }}
    protocol: TCP
{{- end }}
  - name: http-metrics
    containerPort: {{ .Values.ports.http }}
    protocol: TCP
# /healthz answers while the process runs; /readyz once the endpoint cache has synced and until
# shutdown starts (the gRPC health service says the same to Envoy).
livenessProbe:
  httpGet: { path: /healthz, port: http-metrics }
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet: { path: /readyz, port: http-metrics }
  {{- toYaml .Values.probes.readiness | nindent 2 }}
startupProbe:
  httpGet: { path: /healthz, port: http-metrics }
  {{- toYaml .Values.probes.startup | nindent 2 }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
env:
  {{- include "llm-extproc.env" . | nindent 2 }}
volumeMounts:
  {{- include "llm-extproc.configMounts" . | nindent 2 }}
{{- if .Values.gateway.envoyGateway.sidecar.enabled }}
  - name: llm-extproc-socket
    mountPath: {{ include "llm-extproc.socketDir" . }}
{{- end }}
{{- end -}}

{{- /* What the server reads (config, endpoints, TLS pair) and /tmp: the server's mounts and the check-config test pod's. */ -}}
{{- define "llm-extproc.configMounts" -}}
- name: llm-extproc-config
  mountPath: {{ include "llm-extproc.configDir" . }}
  readOnly: true
{{- if and .Values.tls.enabled .Values.tls.secretName }}
- name: llm-extproc-tls
  mountPath: {{ include "llm-extproc.configDir" . }}/tls
  readOnly: true
{{- if .Values.tls.clientCaSecretName }}
- name: llm-extproc-client-ca
  mountPath: {{ include "llm-extproc.configDir" . }}/client-ca
  readOnly: true
{{- end }}
{{- end }}
{{- if .Values.sessions.keySecretName }}
- name: llm-extproc-session
  mountPath: {{ include "llm-extproc.configDir" . }}/session
  readOnly: true
{{- end }}
{{- if or .Values.tokenizer.configMap .Values.tokenizer.volume }}
- name: llm-extproc-tokenizer
  mountPath: {{ include "llm-extproc.tokenizerDir" . }}
  readOnly: true
  {{- with .Values.tokenizer.subPath }}
  subPath: {{ . }}
  {{- end }}
{{- end }}
# Node writes nothing else; a writable /tmp keeps libraries that want one working.
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- /* Where the model's tokenizer files are mounted (precise prefix matching). */ -}}
{{- define "llm-extproc.tokenizerDir" -}}{{ include "llm-extproc.configDir" . }}/tokenizer{{- end -}}

{{- /*
Whether each replica names itself for access-log forwarding (peerForwarding): "true" or empty.
auto = on where the chart itself makes the gateway send Envoy's access log (gateway.envoy's Envoy
config carries it) and mutual TLS is off; elsewhere an operator who wires the gateway's access log
(docs/gateways.md) sets true. Never in the sidecar mode (one replica per Envoy pod, on a socket).
Off where no access log comes matters: a replica that expects forwarded entries waits 3 s for each
broken stream's entry, and its replica check with it.
*/ -}}
{{- define "llm-extproc.peerForwarding" -}}
{{- $p := toString .Values.peerForwarding -}}
{{- $auto := and (eq $p "auto") .Values.gateway.envoy.enabled (not .Values.tls.clientCaSecretName) -}}
{{- if and (not .Values.gateway.envoyGateway.sidecar.enabled) (or (eq $p "true") $auto) -}}true{{- end -}}
{{- end -}}

{{- /* The container's environment: the server's and the check-config test pod's. */ -}}
{{- define "llm-extproc.env" -}}
- name: NODE_OPTIONS
  value: {{ .Values.nodeOptions | quote }}
{{- if include "llm-extproc.peerForwarding" . }}
# listen.peerAddress: where the other replicas send the access-log entries of this pod's streams.
- name: POD_IP
  valueFrom:
    fieldRef: { fieldPath: status.podIP }
- name: LLM_EXTPROC_PEER_ADDRESS
  value: "$(POD_IP):{{ .Values.ports.grpc }}"
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "llm-extproc.volumes" -}}
- name: llm-extproc-config
  configMap:
    name: {{ include "llm-extproc.fullname" . }}
{{- if and .Values.tls.enabled .Values.tls.secretName }}
- name: llm-extproc-tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- if .Values.tls.clientCaSecretName }}
- name: llm-extproc-client-ca
  secret:
    secretName: {{ .Values.tls.clientCaSecretName }}
    items: [{ key: ca.crt, path: ca.crt }]
{{- end }}
{{- end }}
{{- if .Values.sessions.keySecretName }}
- name: llm-extproc-session
  secret:
    secretName: {{ .Values.sessions.keySecretName }}
    items: [{ key: keys, path: keys }]
{{- end }}
{{- if .Values.tokenizer.configMap }}
- name: llm-extproc-tokenizer
  configMap:
    name: {{ .Values.tokenizer.configMap }}
{{- else if .Values.tokenizer.volume }}
- name: llm-extproc-tokenizer
  {{- toYaml .Values.tokenizer.volume | nindent 2 }}
{{- end }}
- name: tmp
  emptyDir: { sizeLimit: 16Mi }
{{- end -}}

{{/*
The peers allowed to the gRPC port: networkPolicy.grpc.from when set, else the Envoy pods of the
enabled gateway block.
- Envoy Gateway and Envoy AI Gateway (which runs on it): the proxy pods Envoy Gateway creates, in
  networkPolicy.grpc.envoyGatewayNamespace (its controller namespace by default).
- Istio with gateway.inferencePool.istio.gateways: each named Gateway's pods (Istio labels them
  gateway.networking.k8s.io/gateway-name), in its namespace.
- Any other InferencePool gateway (kgateway; Istio without named gateways): pods carrying a
  gateway.networking.k8s.io/gateway-name label, in any namespace.
- Plain Envoy, or no gateway block: pods of the release namespace.
*/}}
{{- define "llm-extproc.gatewayPeers" -}}
{{- $np := .Values.networkPolicy -}}
{{- $gw := .Values.gateway -}}
{{- $ip := $gw.inferencePool -}}
{{- if $np.grpc.from -}}
{{ toYaml $np.grpc.from }}
{{- else if or $gw.envoyGateway.enabled (and $ip.enabled $ip.aiGateway.enabled) -}}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ $np.grpc.envoyGatewayNamespace }}
  podSelector:
    matchLabels:
      app.kubernetes.io/name: envoy
      app.kubernetes.io/component: proxy
{{- else if and $ip.enabled (gt (len $ip.istio.gateways) 0) -}}
{{- range $ip.istio.gateways }}
- namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: {{ .namespace | default $.Release.Namespace }}
  podSelector:
    matchLabels:
      gateway.networking.k8s.io/gateway-name: {{ .name }}
{{- end }}
{{- else if $ip.enabled -}}
- namespaceSelector: {}
  podSelector:
    matchExpressions:
      - key: gateway.networking.k8s.io/gateway-name
        operator: Exists
{{- else -}}
- podSelector: {}
{{- end -}}
{{- end -}}
