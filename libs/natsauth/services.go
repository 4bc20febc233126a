package natsauth

import (
	"fmt"
	"slices"

	"github.com/nats-io/jwt/v2"

	"github.com/configsync/configsync/libs/protocol"
)

// The backend services, each with its own least-privilege NATS user (ServiceCreds). The outbox relay
// runs inside config-api and publishes with config-api's user.
const (
	ConfigAPIService  = "config-api"
	ResolverService   = "resolver"
	CredentialService = "credential"
	DeliveryService   = "delivery"
	AckIngestService  = "ack-ingest"
)

// ServiceNames lists the services that have a user, in the order of the README table.
var ServiceNames = []string{ConfigAPIService, ResolverService, CredentialService, DeliveryService, AckIngestService}

// ServiceInboxPrefix is the reply-inbox prefix service name uses (natsconn's NATS_INBOX_PREFIX), so
// that only it can read the replies to its requests. It is one subject token, "_INBOX_<service>", which
// no agent can subscribe to: agents may subscribe only _INBOX.<own id>.> (a different first token).
func ServiceInboxPrefix(name string) string { return "_INBOX_" + name }

// MonitorInboxPrefix is the inbox prefix of monitoring clients (an operator's `nats micro stats`
// --inbox-prefix, test observers): the micro services may answer $SRV requests there, and nowhere else
// outside the services' own inboxes.
const MonitorInboxPrefix = "_INBOX_monitor"

// ServicePermission is one service user's allow-lists. Everything not listed is denied.
type ServicePermission struct {
	Service   string
	Publish   []string
	Subscribe []string
	// ManagesStreams: the user may create and update the JetStream streams (natsconn's
	// NATS_MANAGE_STREAMS=true). Stream management can point a stream at any subject of the account, so
	// only config-api, which holds the operator signing key anyway, has it.
	ManagesStreams bool
}

// jsConsumer is what a durable pull consumer of stream needs: create (the filtered form carries the
// filter subject), info, pull, and acknowledge (ack, nak, in-progress, term).
func jsConsumer(stream string) []string {
	return []string{
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".*",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".*",
		"$JS.ACK." + stream + ".>",
	}
}

// jsStreamInfo is reading stream's info (read-only): the services that consume it export its size
// and limits (libs/platform/metrics RegisterStreams).
func jsStreamInfo(stream string) string { return "$JS.API.STREAM.INFO." + stream }

// jsStreamAdmin is what natsconn.EnsureStreams needs for stream: read, create, update.
func jsStreamAdmin(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.STREAM.CREATE." + stream,
		"$JS.API.STREAM.UPDATE." + stream,
	}
}

// microService is what a nats.go micro service needs beyond its endpoints: the $SRV discovery subjects,
// and answering them on the monitoring inbox.
const (
	microService = "$SRV.>"
	microAnswers = MonitorInboxPrefix + ".>"
)

// agentInboxes are the agents' reply inboxes (_INBOX.<agent id>.>). Services' own inboxes start with
// another token (_INBOX_<service>), so this reaches no service's replies.
const agentInboxes = "_INBOX.>"

func inboxOf(name string) string { return ServiceInboxPrefix(name) + ".>" }

func join(parts ...[]string) []string { return slices.Concat(parts...) }

// ServicePermissions is THE table of what every service user may do (the README shows the same). Who
// requests what:
//
//   - config-api: resolver (resolve; resolve_sets.v1 for drift's expected configs), credential (create, rotate, delete, get, list,
//     account_update — only config-api asks the custodian to re-sign the account); its outbox relay
//     publishes configsync.events.> into JetStream (PubAcks come to its inbox); it ensures the three
//     streams; it answers agents' credential renewals (queue-subscribes configsync.agent.*.creds.renew
//     and replies to the asking agent's _INBOX.<id>.> inbox, the one the agent may read).
//   - delivery: answers agents' fetches (subscribes configsync.agent.*.config.fetch, replies to the
//     agents' _INBOX.<id>.> inboxes), pushes configsync.cmd.<id>, requests resolver (the resolve_sets
//     contract: resolve_sets.v1 for fetches, resolve_push.v1 for fan-outs) and credential inject,
//     consumes CONFIGSYNC_EVENTS (and reads its stream info for its metrics).
//   - resolver and credential: micro services; they reply only to config-api's and delivery's inboxes
//     (and answer $SRV requests on MonitorInboxPrefix). The credential service also answers
//     account_update (covered by configsync.svc.credential.>); it looks the account up and pushes it
//     as a system-account user (SystemCreds) on a connection of its own, not with this user.
//   - ack-ingest: consumes CONFIGSYNC_ACKS and CONFIGSYNC_HEARTBEATS (and reads their stream info for
//     its metrics), and hands the gaps its anti-entropy check finds to delivery on
//     configsync.repair.request; it publishes nothing else (never to agents). Only delivery subscribes
//     repair requests.
func ServicePermissions() []ServicePermission {
	return []ServicePermission{
		{
			Service: ConfigAPIService,
			Publish: join(
				[]string{
					protocol.ResolveSubject, protocol.ResolveSetsSubject,
					protocol.CredentialCreateSubject, protocol.CredentialRotateSubject, protocol.CredentialDeleteSubject,
					protocol.CredentialGetSubject, protocol.CredentialListSubject, protocol.AccountUpdateSubject,
					protocol.EventsSubjects,
					// Renewal replies: agents' inboxes (ServeRenewals answers only the asking agent's own).
					agentInboxes,
				},
				jsStreamAdmin(protocol.EventsStream), jsStreamAdmin(protocol.AcksStream), jsStreamAdmin(protocol.HeartbeatsStream),
			),
			Subscribe:      []string{inboxOf(ConfigAPIService), protocol.CredsRenewSubjectAll},
			ManagesStreams: true,
		},
		{
			Service:   ResolverService,
			Publish:   []string{inboxOf(ConfigAPIService), inboxOf(DeliveryService), microAnswers},
			Subscribe: []string{"configsync.svc." + ResolverService + ".>", microService},
		},
		{
			Service:   CredentialService,
			Publish:   []string{inboxOf(ConfigAPIService), inboxOf(DeliveryService), microAnswers},
			Subscribe: []string{"configsync.svc." + CredentialService + ".>", microService},
		},
		{
			Service: DeliveryService,
			Publish: join(
				[]string{
					protocol.CommandSubjectPrefix + "*", agentInboxes, microAnswers,
					protocol.ResolveSetsSubject, protocol.ResolvePushSubject, protocol.CredentialInjectSubject,
					// Read-only: how far ack-ingest's heartbeat consumer is behind (while it lags, delivery
					// pushes regardless of the stored heartbeats).
					"$JS.API.CONSUMER.INFO." + protocol.HeartbeatsStream + "." + protocol.HeartbeatsIngestDurable,
					jsStreamInfo(protocol.EventsStream),
				},
				jsConsumer(protocol.EventsStream),
			),
			Subscribe: []string{protocol.FetchSubjectAll, protocol.RepairSubject, microService, inboxOf(DeliveryService)},
		},
		{
			Service: AckIngestService,
			Publish: join(
				[]string{protocol.RepairSubject, jsStreamInfo(protocol.AcksStream), jsStreamInfo(protocol.HeartbeatsStream)},
				jsConsumer(protocol.AcksStream), jsConsumer(protocol.HeartbeatsStream),
			),
			Subscribe: []string{inboxOf(AckIngestService)},
		},
	}
}

// ServicePermissionOf returns name's row of ServicePermissions.
func ServicePermissionOf(name string) (ServicePermission, error) {
	for _, p := range ServicePermissions() {
		if p.Service == name {
			return p, nil
		}
	}
	return ServicePermission{}, fmt.Errorf("natsauth: no NATS user is defined for service %q (known: %v)", name, ServiceNames)
}

// JWT returns the permissions as they go into the user JWT.
func (p ServicePermission) JWT() jwt.Permissions {
	var perms jwt.Permissions
	perms.Pub.Allow.Add(p.Publish...)
	perms.Sub.Allow.Add(p.Subscribe...)
	return perms
}

// ServiceCreds issues service name's user of the ConfigSync account with its ServicePermissions row
// (an unknown name is an error). The service must connect with ServiceInboxPrefix(name) as its inbox
// prefix.
func (a *Authority) ServiceCreds(name string) (Creds, error) {
	p, err := ServicePermissionOf(name)
	if err != nil {
		return Creds{}, err
	}
	return issueUser(name, a.AccountPublicKey(), a.account, func(uc *jwt.UserClaims) {
		uc.Permissions = p.JWT()
	})
}

// CombinedServiceCreds issues one user allowed everything the listed services are, for a process that
// runs several of them over one connection (devstack). It uses the first service's inbox prefix.
func (a *Authority) CombinedServiceCreds(name string, services ...string) (Creds, error) {
	var perms jwt.Permissions
	for _, svc := range services {
		p, err := ServicePermissionOf(svc)
		if err != nil {
			return Creds{}, err
		}
		perms.Pub.Allow.Add(p.Publish...)
		perms.Sub.Allow.Add(p.Subscribe...)
	}
	return issueUser(name, a.AccountPublicKey(), a.account, func(uc *jwt.UserClaims) {
		uc.Permissions = perms
	})
}

// UnrestrictedCreds issues a user of the ConfigSync account with no permission limits. It is for test
// harnesses that observe every subject and for local benchmarks that simulate a whole fleet on a few
// connections — never for a service.
func (a *Authority) UnrestrictedCreds(name string) (Creds, error) {
	return issueUser(name, a.AccountPublicKey(), a.account, nil)
}
