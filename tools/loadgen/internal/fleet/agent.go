package fleet

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/configsync/configsync/libs/agentconfig"
	"github.com/configsync/configsync/libs/protocol"
)

// Agent is one simulated agent: its identity, the connection it publishes on, and the state a real
// agent keeps (the config cache it hashes into heartbeats, the versions it refuses to go back from).
type Agent struct {
	ID      string
	conn    *nats.Conn
	replies *replyMux // fetch replies on this agent's own inbox prefix

	mu      sync.Mutex
	entries map[string]*entry
	deleted map[string]int64 // tombstone versions of deleted types
	hbSeq   int64
	// receipts: the last config_update received per type.
	receipts map[string]Receipt
	fetched  bool
	// firstSeen: per type, the newest version whose first push this agent has decided on (DropPushes).
	firstSeen map[string]int64
	// acks: per type, the newest ack the agent sent (republished after a reconnect).
	acks map[string]protocol.Ack
}

// Receipt is when an agent received a config_update of a type, and which version.
type Receipt struct {
	Version int64
	At      time.Time
}

func newAgent(id string, conn *nats.Conn, replies *replyMux) *Agent {
	return &Agent{ID: id, conn: conn, replies: replies, entries: map[string]*entry{}, deleted: map[string]int64{}, receipts: map[string]Receipt{},
		firstSeen: map[string]int64{}, acks: map[string]protocol.Ack{}}
}

// rememberAck records ack as the newest of its type, the one a reconnect publishes again, unless the
// agent already sent a newer one (commands of one agent may be handled by two workers at once).
func (a *Agent) rememberAck(ack protocol.Ack) {
	a.mu.Lock()
	if old, ok := a.acks[ack.ConfigType]; !ok || old.Version <= ack.Version {
		a.acks[ack.ConfigType] = ack
	}
	a.mu.Unlock()
}

// lastAcks returns the newest ack of every type.
func (a *Agent) lastAcks() []protocol.Ack {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]protocol.Ack, 0, len(a.acks))
	for _, ack := range a.acks {
		out = append(out, ack)
	}
	return out
}

// publishAck publishes ack on the agent's connection.
func (a *Agent) publishAck(ack protocol.Ack) error {
	b, err := json.Marshal(ack)
	if err != nil {
		return err
	}
	return a.conn.Publish(protocol.AckSubject(a.ID), b)
}

// versionLocked is the newest version the agent holds for a type, cached or deleted.
func (a *Agent) versionLocked(configType string) int64 {
	if e, ok := a.entries[configType]; ok {
		return e.cache.Version
	}
	return a.deleted[configType]
}

// applyFetch replaces the agent's state with a fetch reply (what the real agent's cache does with a
// successful fetch).
func (a *Agent) applyFetch(t *entryTable, r protocol.FetchReply) error {
	next := make(map[string]*entry, len(r.Configs))
	for typ, data := range r.Configs {
		e, err := t.intern(typ, r.Versions[typ], data, r.SecretFields[typ])
		if err != nil {
			return err
		}
		next[typ] = e
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for typ, v := range r.Versions {
		if _, ok := next[typ]; !ok {
			if _, withheld := r.TypeErrors[typ]; !withheld {
				a.deleted[typ] = v
			}
		}
	}
	// A type the backend could not deliver (TypeErrors) keeps what the agent had.
	for typ := range r.TypeErrors {
		if e, ok := a.entries[typ]; ok {
			next[typ] = e
		}
	}
	a.entries = next
	a.fetched = true
	return nil
}

// dropFirst reports whether this agent loses this command: the first command of a (type, version) it
// receives is lost for a share p of the agents (chosen by a hash of agent, type and version, so the
// share holds whatever the order of arrival); later ones of the same version are never lost.
func (a *Agent) dropFirst(configType string, version int64, p float64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.firstSeen[configType] >= version {
		return false
	}
	a.firstSeen[configType] = version
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", a.ID, configType, version)
	return float64(h.Sum64()%1_000_000) < p*1_000_000
}

// commandOutcome is what handling one command did.
type commandOutcome int

const (
	outcomeApplied commandOutcome = iota
	// outcomeRepeated: applied (and acknowledged) again, a version the agent already held.
	outcomeRepeated
	outcomeStale
	outcomeRejected
)

// handle applies one config_update the way the agent's ConfigHandler does: an older version than the
// cached one is ignored and acknowledged with the cached version; anything else is cached (a null
// payload deletes the type) and acknowledged as applied. It returns the ack to publish.
func (a *Agent) handle(t *entryTable, cmd protocol.Command, received time.Time) (protocol.Ack, commandOutcome) {
	ack := protocol.Ack{AgentID: a.ID, ConfigType: cmd.ConfigType, Version: cmd.Version, Status: protocol.AckApplied}
	deleted := agentconfig.IsNull(cmd.Payload)
	var e *entry
	if !deleted {
		if !json.Valid(cmd.Payload) {
			ack.Status, ack.Error = protocol.AckFailed, "payload is not valid JSON"
			ack.AppliedAt = time.Now().UTC()
			return ack, outcomeRejected
		}
		var err error
		if e, err = t.intern(cmd.ConfigType, cmd.Version, cmd.Payload, cmd.SecretFields); err != nil {
			ack.Status, ack.Error = protocol.AckFailed, err.Error()
			ack.AppliedAt = time.Now().UTC()
			return ack, outcomeRejected
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.receipts[cmd.ConfigType] = Receipt{Version: cmd.Version, At: received}
	cur := a.versionLocked(cmd.ConfigType)
	if cmd.Version < cur {
		ack.Version = cur
		ack.AppliedAt = time.Now().UTC()
		return ack, outcomeStale
	}
	outcome := outcomeApplied
	if cmd.Version == cur {
		outcome = outcomeRepeated
	}
	if deleted {
		delete(a.entries, cmd.ConfigType)
		a.deleted[cmd.ConfigType] = cmd.Version
	} else {
		a.entries[cmd.ConfigType] = e
		delete(a.deleted, cmd.ConfigType)
	}
	ack.AppliedAt = time.Now().UTC()
	return ack, outcome
}

// refuse answers a config_update the agent's local policy refuses, the way the agent's ConfigHandler
// does: the version is acknowledged failed with the reason and nothing the agent holds changes.
func (a *Agent) refuse(cmd protocol.Command, reason string, received time.Time) protocol.Ack {
	a.mu.Lock()
	a.receipts[cmd.ConfigType] = Receipt{Version: cmd.Version, At: received}
	a.mu.Unlock()
	return protocol.Ack{AgentID: a.ID, ConfigType: cmd.ConfigType, Version: cmd.Version, Status: protocol.AckFailed,
		Error: reason, AppliedAt: time.Now().UTC()}
}

// heartbeat builds the agent's next heartbeat. AgentVersion carries a per-agent sequence number
// ("<base>+hb.<n>") so that the heartbeat scenario can tell, from the hosts table alone, how many
// heartbeats have landed.
func (a *Agent) heartbeat(t *entryTable, baseVersion string, now time.Time) protocol.Heartbeat {
	a.mu.Lock()
	a.hbSeq++
	seq := a.hbSeq
	entries := make([]*entry, 0, len(a.entries))
	versions := make(map[string]int64, len(a.entries))
	for typ, e := range a.entries {
		entries = append(entries, e)
		versions[typ] = e.cache.Version
	}
	a.mu.Unlock()
	var maxVersion int64
	for _, v := range versions {
		maxVersion = max(maxVersion, v)
	}
	return protocol.Heartbeat{
		AgentID:        a.ID,
		SentAt:         now.UTC(),
		AgentVersion:   HeartbeatVersion(baseVersion, seq),
		ConfigHash:     t.hash(entries),
		ConfigVersion:  maxVersion,
		ConfigVersions: versions,
	}
}

// HeartbeatVersion is the agent_version a simulated agent reports in its seq-th heartbeat.
func HeartbeatVersion(base string, seq int64) string {
	return base + "+hb." + strconv.FormatInt(seq, 10)
}

// State is a copy of what an agent holds.
type State struct {
	Fetched        bool
	ConfigHash     string
	ConfigVersions map[string]int64
	Entries        []agentconfig.CacheEntry
	HeartbeatSeq   int64
	Receipts       map[string]Receipt
}

func (a *Agent) state(t *entryTable) State {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := State{Fetched: a.fetched, ConfigVersions: map[string]int64{}, HeartbeatSeq: a.hbSeq, Receipts: maps.Clone(a.receipts)}
	entries := make([]*entry, 0, len(a.entries))
	for typ, e := range a.entries {
		entries = append(entries, e)
		s.ConfigVersions[typ] = e.cache.Version
		s.Entries = append(s.Entries, e.cache)
	}
	s.ConfigHash = t.hash(entries)
	return s
}
