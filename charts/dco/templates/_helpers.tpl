{{/* The release's name for its objects: <release>-dco, or the release name when it already says dco. */}}
{{- define "dco.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Selector labels of the operator Pods. `app.kubernetes.io/name: dco-operator` is also the label
the operator itself puts on the ValidatingWebhookConfiguration
(operator/src/admission/registration.rs): the chart and the operator agree on it, so neither
rewrites the other's value.
*/}}
{{/* The operator's Deployment, ServiceAccount and RBAC: <fullname>-operator. */}}
{{- define "dco.operatorName" -}}
{{- printf "%s-operator" (include "dco.fullname" .) -}}
{{- end -}}

{{- define "dco.selectorLabels" -}}
app.kubernetes.io/name: dco-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dco.labels" -}}
{{ include "dco.selectorLabels" . }}
{{ include "dco.commonLabels" . }}
{{- end -}}

{{/* The labels of every object of the release, bar the name; then the commonLabels value. */}}
{{- define "dco.commonLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: dco
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "dco.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "dco.operatorName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: set the ServiceAccount the operator runs as when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The images' default tag: v<appVersion>, as hack/image tags them (docs/images.md). */}}
{{- define "dco.defaultTag" -}}
{{- if hasPrefix "v" .Chart.AppVersion -}}{{ .Chart.AppVersion }}{{- else -}}v{{ .Chart.AppVersion }}{{- end -}}
{{- end -}}

{{/*
An image: image.registry (when set) before the repository, then @digest when one is set (the
tag is then ignored), else :tag (default v<appVersion>). Called with (list $ .Values.image).
*/}}
{{- define "dco.imageRef" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $repo := $img.repository -}}
{{- with $root.Values.image.registry -}}{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo -}}{{- end -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (default (include "dco.defaultTag" $root) $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "dco.image" -}}
{{- include "dco.imageRef" (list . .Values.image) -}}
{{- end -}}

{{- define "dco.webhookImage" -}}
{{- include "dco.imageRef" (list . .Values.webhookImage) -}}
{{- end -}}

{{/* --namespace: where servers without spec.namespace run their webhook Pods. */}}
{{- define "dco.workloadNamespace" -}}
{{- default .Release.Namespace .Values.operator.namespace -}}
{{- end -}}

{{- define "dco.leaseNamespace" -}}
{{- default .Release.Namespace .Values.operator.leaseNamespace -}}
{{- end -}}

{{/*
The namespaces the operator may create webhook workloads in: --namespace, the default server's
spec.namespace, then rbac.serverNamespaces, without repeats. "*" (any namespace) is handled by
the caller.
*/}}
{{- define "dco.serverNamespaces" -}}
{{- $out := list (include "dco.workloadNamespace" .) -}}
{{- if and .Values.defaultServer.enabled .Values.defaultServer.spec.namespace -}}
{{- $out = append $out .Values.defaultServer.spec.namespace -}}
{{- end -}}
{{- range .Values.rbac.serverNamespaces -}}
{{- if ne . "*" -}}{{- $out = append $out . -}}{{- end -}}
{{- end -}}
{{- $out | uniq | toJson -}}
{{- end -}}

{{- define "dco.anyServerNamespace" -}}
{{- if has "*" .Values.rbac.serverNamespaces -}}true{{- end -}}
{{- end -}}

{{/*
--server-namespaces: "*" when rbac.serverNamespaces has it, else the namespaces of
dco.serverNamespaces. The operator watches its Secrets, Deployments, Services and Leases there
only, and refuses a server whose namespace is not among them; the RBAC below grants the same.
*/}}
{{- define "dco.serverNamespacesFlag" -}}
{{- if include "dco.anyServerNamespace" . -}}*{{- else -}}{{ include "dco.serverNamespaces" . | fromJsonArray | join "," }}{{- end -}}
{{- end -}}

{{- define "dco.admissionService" -}}
{{- printf "%s-admission" (include "dco.fullname" .) -}}
{{- end -}}

{{/*
The cert-manager Certificate of the admission certificate and its Secret (one name), with
admission.certManager.enabled: the operator serves it (--admission-tls-secret).
*/}}
{{- define "dco.admissionCertManagerSecret" -}}
{{- printf "%s-cert-manager" (include "dco.admissionService" .) -}}
{{- end -}}

{{/*
The ValidatingWebhookConfiguration's name, as the operator derives it by default
(registration.rs `default_webhook_name`: dco-operator-admission, then the first 4 bytes of
the SHA-256 of --selector in hex). The chart passes it explicitly, and limits the operator's
rights on webhook configurations to it.
*/}}
{{- define "dco.admissionWebhookName" -}}
{{- if .Values.admission.webhookName -}}
{{- .Values.admission.webhookName -}}
{{- else if .Values.operator.selector -}}
{{- printf "dco-operator-admission-%s" (sha256sum .Values.operator.selector | trunc 8) -}}
{{- else -}}
dco-operator-admission
{{- end -}}
{{- end -}}

{{/* The XRD guard's MutatingWebhookConfiguration (registration.rs `guard_name`). */}}
{{- define "dco.xrdGuardWebhookName" -}}
{{- printf "%s-xrd-guard" (include "dco.admissionWebhookName" .) -}}
{{- end -}}

{{/* The listen host: the Pod's own address (bindPodIP), or every address. */}}
{{- define "dco.listenHost" -}}
{{- if .Values.bindPodIP -}}$(POD_IP){{- else -}}0.0.0.0{{- end -}}
{{- end -}}

{{/*
Pod Security "restricted" (the checks of k8s.io/pod-security-admission, as
operator/src/server/desired.rs applies them to webhook Pods): non-root with a numeric uid
(65532, distroless' nonroot), the runtime's seccomp profile, no privilege escalation, every
capability dropped, a read-only root filesystem (dco-operator writes no file).
*/}}
{{- define "dco.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "dco.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/*
Labels of the default server that a simple --selector (k=v,k2=v2) asks for, so the operator
scoped by it manages the chart's server. Set-based selectors need defaultServer.labels.
*/}}
{{- define "dco.selectorAsLabels" -}}
{{- $out := dict -}}
{{- range (splitList "," (default "" .Values.operator.selector)) -}}
{{- $p := trim . -}}
{{- if and (contains "=" $p) (not (contains "!" $p)) -}}
{{- $kv := splitList "=" (replace "==" "=" $p) -}}
{{- if eq (len $kv) 2 -}}{{- $_ := set $out (trim (index $kv 0)) (trim (index $kv 1)) -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $out | toJson -}}
{{- end -}}
