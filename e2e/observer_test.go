package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/protocol"
)

// observerName is the NATS connection name of the test's own observer.
const observerName = "e2e-observer"

// observer watches NATS with a service user: every command sent to an agent, every ack an agent
// publishes, and every JetStream message handed to a service replica's pull consumer (it learns each
// consumer's delivery inbox from the pull requests and listens on it too). It also asks $SRV.STATS.
type observer struct {
	t  testing.TB
	s  *stack
	nc *nats.Conn

	mu         sync.Mutex
	commands   []seenCommand
	acks       []protocol.Ack
	inboxes    map[string]string // delivery inbox -> "stream/consumer"
	inboxSubs  map[string]*nats.Subscription
	deliveries []jsDelivery
	owners     map[string]string // delivery inbox -> connection name, resolved while the owner runs
	fetches    map[string][]protocol.FetchReply
}

// seenCommand is one command as it travelled on configsync.cmd.<agent_id>.
type seenCommand struct {
	agentID string
	cmd     protocol.Command
	at      time.Time
}

// jsDelivery is one JetStream message delivered to a consumer's inbox.
type jsDelivery struct {
	inbox        string
	stream       string
	consumer     string
	streamSeq    uint64
	numDelivered uint64
	data         []byte
}

func newObserver(t testing.TB, s *stack) *observer {
	t.Helper()
	o := &observer{t: t, s: s, inboxes: map[string]string{}, inboxSubs: map[string]*nats.Subscription{}, owners: map[string]string{},
		fetches: map[string][]protocol.FetchReply{}}
	nc, err := nats.Connect(s.nats.URL(), nats.UserCredentials(s.obsCreds), nats.Name(observerName),
		// The micro services answer $SRV.STATS only on the monitoring inbox (natsauth.ServicePermissions).
		nats.CustomInboxPrefix(natsauth.MonitorInboxPrefix),
		nats.RootCAs(s.nats.CAFile()),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("e2e: observer connect: %v", err)
	}
	t.Cleanup(nc.Close)
	o.nc = nc
	subs := map[string]nats.MsgHandler{
		protocol.CommandSubjectPrefix + "*": o.onCommand,
		protocol.AckSubjectAll:              o.onAck,
		"$JS.API.CONSUMER.MSG.NEXT.>":       o.onPullRequest,
	}
	for subject, h := range subs {
		if _, err := nc.Subscribe(subject, h); err != nil {
			t.Fatalf("e2e: observer subscribe %s: %v", subject, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("e2e: observer flush: %v", err)
	}
	return o
}

func (o *observer) onCommand(m *nats.Msg) {
	var c protocol.Command
	if err := json.Unmarshal(m.Data, &c); err != nil {
		c = protocol.Command{CommandID: "<undecodable: " + err.Error() + ">"}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.commands = append(o.commands, seenCommand{agentID: strings.TrimPrefix(m.Subject, protocol.CommandSubjectPrefix), cmd: c, at: time.Now()})
}

func (o *observer) onAck(m *nats.Msg) {
	var a protocol.Ack
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acks = append(o.acks, a)
}

// onPullRequest learns the inbox a replica's pull consumer receives on and listens there too.
func (o *observer) onPullRequest(m *nats.Msg) {
	// $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	tokens := strings.Split(m.Subject, ".")
	if len(tokens) != 7 || m.Reply == "" {
		return
	}
	o.mu.Lock()
	_, known := o.inboxes[m.Reply]
	if !known {
		o.inboxes[m.Reply] = tokens[5] + "/" + tokens[6]
	}
	o.mu.Unlock()
	if known {
		return
	}
	inbox := m.Reply
	sub, err := o.nc.Subscribe(inbox, func(d *nats.Msg) { o.onDelivery(inbox, d) })
	if err != nil {
		o.t.Logf("e2e: observer cannot listen on %s: %v", inbox, err)
		return
	}
	o.mu.Lock()
	o.inboxSubs[inbox] = sub
	o.mu.Unlock()
}

// stopWatching stops listening on the delivery inboxes of a replica about to be killed. Listening on a
// dead replica's inbox would keep its pending pull requests alive in the server's eyes (there is
// interest), and JetStream would keep handing messages to it until their ack wait ran out.
func (o *observer) stopWatching(replica string) {
	o.resolveOwners()
	o.mu.Lock()
	defer o.mu.Unlock()
	for inbox, sub := range o.inboxSubs {
		if o.owners[inbox] == replica {
			_ = sub.Unsubscribe()
			delete(o.inboxSubs, inbox)
		}
	}
}

// onDelivery records a real message (one with a $JS.ACK reply); status messages are skipped.
func (o *observer) onDelivery(inbox string, m *nats.Msg) {
	if !strings.HasPrefix(m.Reply, "$JS.ACK.") {
		return
	}
	meta, err := m.Metadata()
	if err != nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deliveries = append(o.deliveries, jsDelivery{inbox: inbox, stream: meta.Stream, consumer: meta.Consumer,
		streamSeq: meta.Sequence.Stream, numDelivered: meta.NumDelivered, data: append([]byte(nil), m.Data...)})
}

// watchAgentInbox records the fetch replies an agent receives (on its own inbox prefix).
func (o *observer) watchAgentInbox(agentID string) {
	_, err := o.nc.Subscribe(protocol.InboxPrefix(agentID)+".>", func(m *nats.Msg) {
		var r protocol.FetchReply
		if json.Unmarshal(m.Data, &r) != nil || (r.Configs == nil && r.Versions == nil) {
			return
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		o.fetches[agentID] = append(o.fetches[agentID], r)
	})
	if err != nil {
		o.t.Fatalf("e2e: observer subscribe to %s's inbox: %v", agentID, err)
	}
	if err := o.nc.Flush(); err != nil {
		o.t.Fatalf("e2e: observer flush: %v", err)
	}
}

// fetchRepliesTo returns the fetch replies one agent received.
func (o *observer) fetchRepliesTo(agentID string) []protocol.FetchReply {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]protocol.FetchReply(nil), o.fetches[agentID]...)
}

// commandsTo returns the commands seen for one agent.
func (o *observer) commandsTo(agentID string) []seenCommand {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []seenCommand
	for _, c := range o.commands {
		if c.agentID == agentID {
			out = append(out, c)
		}
	}
	return out
}

// commandsFor returns the commands seen for one agent, config type and version.
func (o *observer) commandsFor(agentID, configType string, version int64) []seenCommand {
	var out []seenCommand
	for _, c := range o.commandsTo(agentID) {
		if c.cmd.ConfigType == configType && c.cmd.Version == version {
			out = append(out, c)
		}
	}
	return out
}

// acksFor counts the acks one agent published for a type and version.
func (o *observer) acksFor(agentID, configType string, version int64) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, a := range o.acks {
		if a.AgentID == agentID && a.ConfigType == configType && a.Version == version {
			n++
		}
	}
	return n
}

// deliveriesOf returns the recorded deliveries of one stream.
func (o *observer) deliveriesOf(stream string) []jsDelivery {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []jsDelivery
	for _, d := range o.deliveries {
		if d.stream == stream {
			out = append(out, d)
		}
	}
	return out
}

// resolveOwners maps every known delivery inbox to the name of the connection subscribed to it (the
// service replica), asking the server. Inboxes of replicas that are gone keep their earlier owner.
func (o *observer) resolveOwners() {
	subs := o.s.subscriptionOwners()
	o.mu.Lock()
	defer o.mu.Unlock()
	for inbox := range o.inboxes {
		if name, ok := subs[inbox]; ok {
			o.owners[inbox] = name
		}
	}
}

// owner is the replica a delivery inbox belongs to ("?" when never resolved).
func (o *observer) owner(inbox string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n, ok := o.owners[inbox]; ok {
		return n
	}
	return "?"
}

// subscriptionOwners maps each subscribed subject to the name of the (non-observer) connection that
// holds the subscription.
func (s *stack) subscriptionOwners() map[string]string {
	out := map[string]string{}
	srv := s.nats.Server()
	if srv == nil {
		return out
	}
	cz, err := srv.Connz(&server.ConnzOptions{Subscriptions: true, SubscriptionsDetail: true, Limit: 4096})
	if err != nil {
		s.t.Logf("e2e: connz: %v", err)
		return out
	}
	for _, c := range cz.Conns {
		if c.Name == observerName {
			continue
		}
		for _, sd := range c.SubsDetail {
			out[sd.Subject] = c.Name
		}
	}
	return out
}

// instanceStats is one micro service instance's $SRV.STATS answer, with the replica it runs in.
type instanceStats struct {
	replica string
	stats   micro.Stats
}

// requests is the number of requests the instance served on endpoint ("": on all endpoints).
func (is instanceStats) requests(endpoint string) int {
	n := 0
	for _, e := range is.stats.Endpoints {
		if endpoint == "" || e.Name == endpoint {
			n += e.NumRequests
		}
	}
	return n
}

// serviceStats asks $SRV.STATS.<name> and collects answers until want instances replied (or 3 s
// passed, then it returns what it has). Each answer is tied to its replica through the server's view
// of who subscribes to $SRV.STATS.<name>.<id>.
func (o *observer) serviceStats(name string, want int) []instanceStats {
	inbox := o.nc.NewRespInbox()
	ch := make(chan *nats.Msg, 16)
	sub, err := o.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		o.t.Fatalf("e2e: stats subscribe: %v", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := o.nc.PublishRequest("$SRV.STATS."+name, inbox, nil); err != nil {
		o.t.Fatalf("e2e: stats request: %v", err)
	}
	owners := o.s.subscriptionOwners()
	var out []instanceStats
	timeout := time.After(3 * time.Second)
	for len(out) < want {
		select {
		case m := <-ch:
			var st micro.Stats
			if err := json.Unmarshal(m.Data, &st); err != nil {
				o.t.Fatalf("e2e: $SRV.STATS.%s answer %q: %v", name, m.Data, err)
			}
			replica, ok := owners[fmt.Sprintf("$SRV.STATS.%s.%s", name, st.ID)]
			if !ok {
				replica = "instance " + st.ID
			}
			out = append(out, instanceStats{replica: replica, stats: st})
		case <-timeout:
			return out
		}
	}
	return out
}
