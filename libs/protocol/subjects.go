// Package protocol is ConfigSync's wire contract: the NATS subjects, the JSON messages that travel on
// them and the error codes they carry. It does no I/O, so the agent and every service share it.
package protocol

import "strings"

// Subject prefixes and fixed subjects. Every agent-originated subject lives under
// configsync.agent.<agent_id>. so that a per-agent NATS permission is one pattern.
const (
	AgentSubjectPrefix   = "configsync.agent."
	CommandSubjectPrefix = "configsync.cmd."

	// Wildcards the backend subscribes to.
	FetchSubjectAll     = "configsync.agent.*.config.fetch"
	AckSubjectAll       = "configsync.agent.*.config.ack"
	HeartbeatSubjectAll = "configsync.agent.*.heartbeat"

	// JetStream: config-change events written through the transactional outbox.
	EventsStream         = "CONFIGSYNC_EVENTS"
	EventsSubjects       = "configsync.events.>"
	ConfigChangedSubject = "configsync.events.config.changed"

	// JetStream streams that keep acks and heartbeats across an ack-ingest restart.
	AcksStream       = "CONFIGSYNC_ACKS"
	HeartbeatsStream = "CONFIGSYNC_HEARTBEATS"
	// HeartbeatsIngestDurable is ack-ingest's durable consumer of HeartbeatsStream; delivery reads its
	// progress to tell whether stored heartbeats are current.
	HeartbeatsIngestDurable = "configsync-ack-ingest-heartbeats"

	// Queue group the delivery replicas share for agent fetches.
	DeliveryQueueGroup = "configsync-delivery"

	// RepairSubject carries RepairRequests from ack-ingest (which sees heartbeats behind the versions
	// the hosts should hold) to delivery (the only service that publishes to agents). Core NATS, queue
	// group DeliveryQueueGroup: a lost request is found again at a later heartbeat.
	RepairSubject = "configsync.repair.request"
)

// Backend service endpoints (nats.go micro services).
const (
	ResolverServiceName   = "resolver"
	CredentialServiceName = "credential"

	ResolveSubject = "configsync.svc.resolver.resolve"
	// ResolveSetsSubject resolves many hosts by agent id in one request (delivery's batched fetches)
	// into distinct config sets. It ends in the contract version (ResolveSetsContract): a delivery of
	// another contract finds no responder, an error it retries, rather than a reply it would misread.
	ResolveSetsSubject = "configsync.svc.resolver.resolve_sets.v1"
	// ResolvePushSubject resolves one config type for a page of an environment's hosts (delivery's
	// fan-out of a config-change event) into the same distinct sets; same contract, same version suffix.
	ResolvePushSubject = "configsync.svc.resolver.resolve_push.v1"

	CredentialCreateSubject = "configsync.svc.credential.create"
	CredentialRotateSubject = "configsync.svc.credential.rotate"
	CredentialDeleteSubject = "configsync.svc.credential.delete"
	CredentialListSubject   = "configsync.svc.credential.list"
	CredentialGetSubject    = "configsync.svc.credential.get"
	CredentialInjectSubject = "configsync.svc.credential.inject"
	// AccountUpdateSubject asks the credential service — the custodian of the key that signs the NATS
	// account — to make the servers' account carry a revocation list (AccountUpdateRequest). Only
	// config-api's NATS user may publish it; agents and the internet never reach the custodian.
	AccountUpdateSubject = "configsync.svc.credential.account_update"
	// AccountUpdateQueueGroup is the queue group of the credential replicas answering it.
	AccountUpdateQueueGroup = "configsync-credential-account"
)

// FetchSubject is where an agent asks for all of its configs.
func FetchSubject(agentID string) string { return AgentSubjectPrefix + agentID + ".config.fetch" }

// AckSubject is where an agent reports the result of applying a config.
func AckSubject(agentID string) string { return AgentSubjectPrefix + agentID + ".config.ack" }

// HeartbeatSubject is where an agent reports its config state periodically.
func HeartbeatSubject(agentID string) string { return AgentSubjectPrefix + agentID + ".heartbeat" }

// LogsSubject is where an agent ships its own logs when log_shipping is enabled.
func LogsSubject(agentID string) string { return AgentSubjectPrefix + agentID + ".logs" }

// ObservationSubject is where an agent publishes what it observes (kind: metrics, changes, files, health).
func ObservationSubject(agentID, kind string) string {
	return AgentSubjectPrefix + agentID + "." + kind
}

// CredsRenewSubjectAll is what the service that renews agent credentials subscribes to.
const CredsRenewSubjectAll = "configsync.agent.*.creds.renew"

// CredsRenewQueueGroup is the queue group of the replicas that renew agent credentials.
const CredsRenewQueueGroup = "configsync-creds-renew"

// CredsRenewSubject is where an agent asks for a fresh JWT for its NATS user before it expires.
func CredsRenewSubject(agentID string) string { return AgentSubjectPrefix + agentID + ".creds.renew" }

// CommandSubject is where the backend sends commands to one agent.
func CommandSubject(agentID string) string { return CommandSubjectPrefix + agentID }

// InboxPrefix is the reply-inbox prefix an agent uses, so that its permissions can allow only its own.
func InboxPrefix(agentID string) string { return "_INBOX." + agentID }

// AgentIDFromSubject returns the agent id token of a configsync.agent.<id>.… subject.
func AgentIDFromSubject(subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, AgentSubjectPrefix)
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, ".")
	if !ok || !ValidAgentID(id) {
		return "", false
	}
	return id, true
}

// ValidAgentID reports whether id can be used as a single NATS subject token: 1..128 characters of
// letters, digits, '-' and '_'.
func ValidAgentID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// MaxConfigTypeLen bounds a config type name on the wire.
const MaxConfigTypeLen = 64

// ValidConfigTypeName reports whether t has the shape of a config type name: 1..MaxConfigTypeLen
// lower-case letters, digits and '_', starting with a letter. Whether the type is registered is
// libs/agentconfig's concern; this only keeps malformed names out of stores and logs.
func ValidConfigTypeName(t string) bool {
	if len(t) == 0 || len(t) > MaxConfigTypeLen || t[0] < 'a' || t[0] > 'z' {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
