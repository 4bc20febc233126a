package natsauth

import "github.com/nats-io/jwt/v2"

// The ConfigSync account's JetStream limits (AccountJetStreamLimits). natsconn.StreamConfigs gives each
// of the three streams MaxBytes 1 GiB, so at three replicas they reserve 9 GiB of the account's disk.
const (
	// AccountDiskStorage bounds the bytes all the account's file streams may hold (every replica
	// counts): the three 1 GiB streams at three replicas, plus room for one more stream of that size
	// while an operator migrates one.
	AccountDiskStorage = 12 << 30
	// AccountMaxStreamBytes is the largest MaxBytes one stream may ask for.
	AccountMaxStreamBytes = 2 << 30
	// AccountMemoryStorage: ConfigSync keeps no memory streams; a little room for an operator's
	// debugging stream.
	AccountMemoryStorage = 64 << 20
	// AccountStreams: three streams, plus headroom.
	AccountStreams = 8
	// AccountConsumers: three durables (delivery's events consumer, ack-ingest's acks and heartbeats),
	// plus room for operators' and tests' short-lived consumers.
	AccountConsumers = 64
)

// AccountJetStreamLimits is the JetStream part of the ConfigSync account JWT: bounded disk and memory,
// a bounded number of streams and consumers, and every stream must declare MaxBytes, so no stream —
// for example one filled with junk — can grow until the servers' disks are full.
func AccountJetStreamLimits() jwt.JetStreamLimits {
	return jwt.JetStreamLimits{
		MemoryStorage:        AccountMemoryStorage,
		DiskStorage:          AccountDiskStorage,
		Streams:              AccountStreams,
		Consumer:             AccountConsumers,
		MemoryMaxStreamBytes: AccountMemoryStorage,
		DiskMaxStreamBytes:   AccountMaxStreamBytes,
		MaxBytesRequired:     true,
	}
}

// Agent user limits (AgentLimits), carried by the agent signing key's template so every agent user
// gets them.
const (
	// AgentMaxPayload is the largest message an agent may publish: the servers' max_payload, held here
	// so that raising max_payload for the services never raises it for agents. The agent's largest
	// messages (file-watch observations) stay well below it; acks and heartbeats are at most 64 KiB.
	AgentMaxPayload = 1 << 20
	// AgentMaxSubscriptions bounds an agent connection's subscriptions: an agent needs two (its
	// command subject and its request inbox); a connection opening more is refused the extra ones.
	AgentMaxSubscriptions = 16
)

// AgentLimits is what every agent user may use: bounded payload and subscriptions, unlimited data
// (bytes over time are bounded by the agent's own rates, not by the server).
func AgentLimits() jwt.Limits {
	return jwt.Limits{NatsLimits: jwt.NatsLimits{Subs: AgentMaxSubscriptions, Payload: AgentMaxPayload, Data: jwt.NoLimit}}
}
