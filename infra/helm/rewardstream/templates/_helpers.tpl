{{/* Names and labels. */}}
{{- define "rs.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 40 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "rs.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The role's resource name: <fullname>-<role in kebab case>. Context: dict root role */}}
{{- define "rs.roleName" -}}
{{ include "rs.fullname" .root }}-{{ .role | kebabcase }}
{{- end -}}

{{- define "rs.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .role | kebabcase }}
{{- end -}}

{{- define "rs.secretName" -}}
{{ .Values.credentials.existingSecret | default (printf "%s-credentials" (include "rs.fullname" .)) }}
{{- end -}}

{{/*
What each role runs and reads: its command, its consumer group and the catalog roles of the topics it consumes
(what KEDA reads the lag of), whether it runs sandboxes, and whether its loop drains revoked partitions on a
rebalance (RS_WORKER_REBALANCE_DRAIN_S: the transactional worker loop's roles). The source of these facts is the code:
rewardstream/cli/worker.py and reward.py (commands), schemas.topics.group_for and workers/roles (groups, topics),
workers/audits/service.py (the auditor's: group <prefix>auditor on verdicts). otherBackend: the role's runs are on
the other sandbox backend than sandbox.backend (the auditor re-grades verdicts where they did not run).
*/}}
{{- define "rs.roleFacts" -}}
executor: {args: [worker, executor], group: executor, topics: [generations, run_requests], sandbox: true, consumer: true, rebalances: true}
verifier: {args: [worker, verifier], group: verifier, topics: [generations], sandbox: true, consumer: true, rebalances: true}
judge: {args: [worker, judge], group: judge, topics: [generations], sandbox: false, consumer: true, rebalances: true}
episode: {args: [worker, episode], group: episode, topics: [actions], sandbox: true, consumer: true, rebalances: true}
auditor: {args: [worker, auditor], group: auditor, topics: [verdicts], sandbox: true, consumer: true, rebalances: true, otherBackend: true}
indexer: {args: [worker, indexer], group: indexer, topics: [logs], sandbox: false, consumer: true}
rewardProcessor: {args: [reward, run, --app-id, {{ include "rs.rewardApp" . | quote }}], group: "", app: {{ include "rs.rewardApp" . | quote }}, topics: [executions, verdicts, judgements], sandbox: false, consumer: true}
gateway: {args: [serve], group: "", topics: [], sandbox: false, consumer: false}
{{- end -}}

{{/*
The reward processor's app id: its consumer group, its join table's changelog topic (<app id>-reward-join-changelog)
and its transactional ids. Per release (roles.rewardProcessor.appId, default <release>-rewards), so two releases
on one Kafka cluster never share a group or a changelog. Checked here too (a release name is a DNS name, but an
appId given through --set skips nothing): Kafka topic characters only, short enough for the changelog's name.
Context: root
*/}}
{{- define "rs.rewardApp" -}}
{{- $app := .Values.roles.rewardProcessor.appId | default (printf "%s-rewards" .Release.Name) -}}
{{- if not (regexMatch "^[A-Za-z0-9._-]{1,227}$" $app) -}}
{{- fail (printf "the reward processor's app id %q is not a safe Kafka name (1-227 of A-Z a-z 0-9 . _ -)" $app) -}}
{{- end -}}
{{- $app -}}
{{- end -}}

{{/* The consumer group of a role: <topicPrefix><role>, or the reward processor's app id. Context: dict root role */}}
{{- define "rs.group" -}}
{{- $facts := index (include "rs.roleFacts" .root | fromYaml) .role -}}
{{- if $facts.app -}}{{ $facts.app }}{{- else -}}{{ .root.Values.kafka.topicPrefix }}{{ $facts.group }}{{- end -}}
{{- end -}}

{{/*
The Kafka principal each role runs as when it has its own (credentials.kafkaPrincipals.<role>): the names
schemas/kafka_acls.py gives them, so the ACL rows `python -m infra.helm.acls` prints are that principal's
(tests/unit/infra/helm/test_kafka_principals.py keeps the two lists equal).
*/}}
{{- define "rs.kafkaPrincipalNames" -}}
executor: executor
verifier: verifier
judge: judge
episode: episode
auditor: auditor
indexer: indexer
rewardProcessor: rewards
gateway: gateway
{{- end -}}

{{/*
The suffix of a role's Kafka keys in the Secret: "_<ROLE>" (KAFKA_SASL_USERNAME_REWARD_PROCESSOR...) when
credentials.kafkaPrincipals names the role, else "" (the shared KAFKA_SASL_USERNAME/PASSWORD every role without
its own reads). Fails on an entry that cannot work: a chart-made Secret needs the password; with existingSecret
the values hold none (that Secret holds both keys, and a value here would be ignored). Context: dict root role
*/}}
{{- define "rs.kafkaKeySuffix" -}}
{{- $c := .root.Values.credentials -}}
{{- $own := $c.kafkaPrincipals | default dict -}}
{{- if hasKey $own .role -}}
{{- $p := index $own .role | default dict -}}
{{- if $c.existingSecret -}}
{{- if or $p.username $p.password -}}
{{- fail (printf "credentials.kafkaPrincipals.%s: with existingSecret the Secret %s holds KAFKA_SASL_USERNAME_%s and KAFKA_SASL_PASSWORD_%s; leave username/password empty ({})" .role $c.existingSecret (.role | snakecase | upper) (.role | snakecase | upper)) -}}
{{- end -}}
{{- else if not $p.password -}}
{{- fail (printf "credentials.kafkaPrincipals.%s: no password (the role's Kafka principal needs one; remove the entry to use the shared kafkaSaslUsername/Password)" .role) -}}
{{- end -}}
_{{ .role | snakecase | upper }}
{{- end -}}
{{- end -}}

{{/*
"true" for a role that reads the tasks' hidden part (the verifier grades with it, the auditor re-grades), else
"": only these get it, from S3 with their own identity (rs.s3KeySuffix) or mounted from tasks.hostPath.
Context: the role's name
*/}}
{{- define "rs.readsHidden" -}}
{{- if has . (list "verifier" "auditor") }}true{{ end -}}
{{- end -}}

{{/*
The suffix of a role's S3 keys in the Secret: "_<ROLE>" (S3_ACCESS_KEY_VERIFIER...) when credentials.s3Principals
names the role, else "" (the shared S3_ACCESS_KEY/S3_SECRET_KEY). Fails on an entry that cannot work (a chart-made
Secret needs both keys; with existingSecret the values hold none), and when tasks.registry is set and a role that
reads the tasks' hidden part (the verifier, the auditor) has no pair of its own: the shared pair then reads hidden
tests for every role, or the verifier cannot. Context: dict root role
*/}}
{{- define "rs.s3KeySuffix" -}}
{{- $c := .root.Values.credentials -}}
{{- $own := $c.s3Principals | default dict -}}
{{- if hasKey $own .role -}}
{{- $p := index $own .role | default dict -}}
{{- if $c.existingSecret -}}
{{- if or $p.accessKey $p.secretKey -}}
{{- fail (printf "credentials.s3Principals.%s: with existingSecret the Secret %s holds S3_ACCESS_KEY_%s and S3_SECRET_KEY_%s; leave accessKey/secretKey empty ({})" .role $c.existingSecret (.role | snakecase | upper) (.role | snakecase | upper)) -}}
{{- end -}}
{{- else if not (and $p.accessKey $p.secretKey) -}}
{{- fail (printf "credentials.s3Principals.%s: needs accessKey and secretKey (the role's own S3 identity; remove the entry to use the shared s3AccessKey/s3SecretKey)" .role) -}}
{{- end -}}
_{{ .role | snakecase | upper }}
{{- else if and .root.Values.tasks.registry (include "rs.readsHidden" .role) -}}
{{- fail (printf "tasks.registry is set and roles.%s reads the tasks' hidden part: give it its own S3 identity in credentials.s3Principals.%s (the `verifier` policy of `rewardstream tasks policy`), and keep the shared s3AccessKey/s3SecretKey to the `worker` policy, which may not read hidden/" .role .role) -}}
{{- end -}}
{{- end -}}

{{/*
A credential from the Secret: the shared key, set only when the Secret has it; with a role's suffix
("_EXECUTOR": rs.kafkaKeySuffix, rs.s3KeySuffix) its own key, required (a missing one stops the pod, naming it).
Context: list name key root [suffix]
*/}}
{{- define "rs.secretEnv" -}}
{{- $suffix := "" -}}
{{- if gt (len .) 3 }}{{ $suffix = index . 3 }}{{ end -}}
- name: {{ index . 0 }}
  valueFrom:
    secretKeyRef: {name: {{ include "rs.secretName" (index . 2) }}, key: {{ index . 1 }}{{ $suffix }}{{ if not $suffix }}, optional: true{{ end }}}
{{- end -}}

{{/* An egress rule to one peer set. Context: {peers, ports} */}}
{{- define "rs.egressRule" -}}
- to: {{- toYaml .peers | nindent 4 }}
  ports:
    {{- range .ports }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
{{- end }}
