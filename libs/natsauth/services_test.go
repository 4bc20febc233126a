package natsauth_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/natsauth"
	"github.com/configsync/configsync/libs/natsauth/natsserver"
	"github.com/configsync/configsync/libs/protocol"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// startServerWith starts a nats-server trusting a's operator, its options edited by edit (its log is
// printed when edit turns NoLog off).
func startServerWith(t *testing.T, a *natsauth.Authority, edit func(*server.Options)) *server.Server {
	t.Helper()
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"), NoSigs: true, NoLog: true}
	if err := natsserver.Configure(opts, a, filepath.Join(dir, "accounts")); err != nil {
		t.Fatal(err)
	}
	edit(opts)
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !opts.NoLog {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// serviceConn connects as service name's user with its inbox prefix, collecting async errors.
type serviceConn struct {
	name string
	nc   *nats.Conn
	errs *asyncErrors
}

func connectService(t *testing.T, ns *server.Server, a *natsauth.Authority, name string) serviceConn {
	t.Helper()
	errs := &asyncErrors{}
	nc := connect(t, ns, must(a.ServiceCreds(name)), nats.ErrorHandler(errs.handler),
		nats.CustomInboxPrefix(natsauth.ServiceInboxPrefix(name)))
	return serviceConn{name: name, nc: nc, errs: errs}
}

func (c serviceConn) noErrors(t *testing.T) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("%s: flush: %v", c.name, err)
	}
	c.errs.mu.Lock()
	defer c.errs.mu.Unlock()
	if len(c.errs.errs) > 0 {
		t.Fatalf("%s got errors on an allowed path: %v", c.name, c.errs.errs)
	}
}

func echoEndpoints(t *testing.T, nc *nats.Conn, name string, subjects ...string) {
	t.Helper()
	svc, err := micro.AddService(nc, micro.Config{Name: name, Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	for i, subj := range subjects {
		err := svc.AddEndpoint("e"+string(rune('a'+i)), micro.HandlerFunc(func(r micro.Request) {
			_ = r.Respond([]byte("ok:" + r.Subject()))
		}), micro.WithEndpointSubject(subj))
		if err != nil {
			t.Fatal(err)
		}
	}
}

func request(t *testing.T, c serviceConn, subject string) {
	t.Helper()
	m, err := c.nc.Request(subject, []byte(`{}`), 3*time.Second)
	if err != nil {
		t.Fatalf("%s request %s: %v (errors %v)", c.name, subject, err, c.errs.errs)
	}
	if string(m.Data) != "ok:"+subject {
		t.Fatalf("%s request %s: reply %q", c.name, subject, m.Data)
	}
}

// streamConfigs are ConfigSync's streams as natsconn declares them (sizes within the account limits).
func streamConfigs() []jetstream.StreamConfig {
	mk := func(name, subject string, retention jetstream.RetentionPolicy) jetstream.StreamConfig {
		return jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Retention: retention, Storage: jetstream.FileStorage,
			Discard: jetstream.DiscardOld, MaxBytes: 1 << 30, MaxMsgSize: 64 << 10}
	}
	return []jetstream.StreamConfig{
		mk(protocol.EventsStream, protocol.EventsSubjects, jetstream.LimitsPolicy),
		mk(protocol.AcksStream, protocol.AckSubjectAll, jetstream.WorkQueuePolicy),
		mk(protocol.HeartbeatsStream, protocol.HeartbeatSubjectAll, jetstream.WorkQueuePolicy),
	}
}

// consumeOne creates a durable consumer of stream as c, pulls one message and acknowledges it.
func consumeOne(t *testing.T, c serviceConn, stream, filter string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := must(jetstream.New(c.nc))
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: c.name + "-test", FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("%s create consumer on %s: %v", c.name, stream, err)
	}
	if _, err := cons.Info(ctx); err != nil {
		t.Fatalf("%s consumer info on %s: %v", c.name, stream, err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("%s ack on %s: %v", c.name, stream, err)
		}
		return m.Data()
	}
	t.Fatalf("%s got no message from %s (%v; errors %v)", c.name, stream, batch.Error(), c.errs.errs)
	return nil
}

// TestServiceUsersAllowedPaths runs every path each service uses, as that service's user, on a server in
// operator mode: micro endpoints, requests and replies, pushes, agent fetches, stream management,
// outbox publishes and the JetStream consumers. None may draw a permissions violation.
func TestServiceUsersAllowedPaths(t *testing.T) {
	a := must(natsauth.NewAuthority())
	ns := startServer(t, a)
	api := connectService(t, ns, a, natsauth.ConfigAPIService)
	res := connectService(t, ns, a, natsauth.ResolverService)
	cred := connectService(t, ns, a, natsauth.CredentialService)
	del := connectService(t, ns, a, natsauth.DeliveryService)
	ack := connectService(t, ns, a, natsauth.AckIngestService)
	agent := connect(t, ns, must(a.Issuer().IssueAgent("agent-a")), nats.CustomInboxPrefix(protocol.InboxPrefix("agent-a")))

	echoEndpoints(t, res.nc, protocol.ResolverServiceName, protocol.ResolveSubject, protocol.ResolveSetsSubject, protocol.ResolvePushSubject)
	echoEndpoints(t, cred.nc, protocol.CredentialServiceName, protocol.CredentialCreateSubject, protocol.CredentialRotateSubject,
		protocol.CredentialDeleteSubject, protocol.CredentialGetSubject, protocol.CredentialListSubject, protocol.CredentialInjectSubject)
	fetch, err := micro.AddService(del.nc, micro.Config{Name: "delivery", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fetch.Stop() })
	if err := fetch.AddEndpoint("fetch", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte(`{"configs":{}}`)) }),
		micro.WithEndpointSubject(protocol.FetchSubjectAll), micro.WithEndpointQueueGroup(protocol.DeliveryQueueGroup)); err != nil {
		t.Fatal(err)
	}
	// The credential service answers account updates (a plain queue subscription, as
	// services/credential/internal/account serves it); config-api answers agents' renewals on the
	// agent's own inbox (a queue subscription, as agentidentity.ServeRenewals).
	accountUpdates := must(cred.nc.QueueSubscribe(protocol.AccountUpdateSubject, protocol.AccountUpdateQueueGroup, func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"pushed":true}`))
	}))
	t.Cleanup(func() { _ = accountUpdates.Unsubscribe() })
	renewals := must(api.nc.QueueSubscribe(protocol.CredsRenewSubjectAll, protocol.CredsRenewQueueGroup, func(m *nats.Msg) {
		_ = m.Respond([]byte(`{"jwt":"renewed"}`))
	}))
	t.Cleanup(func() { _ = renewals.Unsubscribe() })
	for _, c := range []serviceConn{res, cred, del, api} {
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	for _, subj := range []string{protocol.ResolveSubject, protocol.ResolveSetsSubject, protocol.CredentialCreateSubject,
		protocol.CredentialRotateSubject, protocol.CredentialDeleteSubject, protocol.CredentialGetSubject, protocol.CredentialListSubject} {
		request(t, api, subj)
	}
	for _, subj := range []string{protocol.ResolveSetsSubject, protocol.ResolvePushSubject, protocol.CredentialInjectSubject} {
		request(t, del, subj)
	}
	if _, err := agent.Request(protocol.FetchSubject("agent-a"), []byte(`{"agent_id":"agent-a"}`), 3*time.Second); err != nil {
		t.Fatalf("agent fetch answered by delivery: %v (delivery errors %v)", err, del.errs.errs)
	}
	if m, err := api.nc.Request(protocol.AccountUpdateSubject, []byte(`{"revocations":{}}`), 3*time.Second); err != nil || string(m.Data) != `{"pushed":true}` {
		t.Fatalf("config-api account update answered by credential: %v (credential errors %v)", err, cred.errs.errs)
	}
	if m, err := agent.Request(protocol.CredsRenewSubject("agent-a"), []byte(`{"agent_id":"agent-a"}`), 3*time.Second); err != nil || string(m.Data) != `{"jwt":"renewed"}` {
		t.Fatalf("agent renewal answered by config-api: %v (config-api errors %v)", err, api.errs.errs)
	}
	cmds := must(agent.SubscribeSync(protocol.CommandSubject("agent-a")))
	if err := agent.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := del.nc.Publish(protocol.CommandSubject("agent-a"), []byte("cmd")); err != nil {
		t.Fatal(err)
	}
	if _, err := cmds.NextMsg(3 * time.Second); err != nil {
		t.Fatalf("push from delivery: %v", err)
	}

	// config-api ensures the streams (create, read, update) and its outbox relay publishes an event.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	apiJS := must(jetstream.New(api.nc))
	for _, cfg := range streamConfigs() {
		if _, err := apiJS.CreateStream(ctx, cfg); err != nil {
			t.Fatalf("config-api create stream %s: %v", cfg.Name, err)
		}
		if _, err := apiJS.Stream(ctx, cfg.Name); err != nil {
			t.Fatalf("config-api stream info %s: %v", cfg.Name, err)
		}
		cfg.Description = "updated"
		if _, err := apiJS.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("config-api update stream %s: %v", cfg.Name, err)
		}
	}
	if _, err := apiJS.Publish(ctx, protocol.ConfigChangedSubject, []byte(`{"event":1}`)); err != nil {
		t.Fatalf("outbox publish as config-api: %v", err)
	}
	// delivery and ack-ingest read the info of the streams they consume (their stream metrics).
	for _, c := range []struct {
		conn    serviceConn
		streams []string
	}{
		{del, []string{protocol.EventsStream}},
		{ack, []string{protocol.AcksStream, protocol.HeartbeatsStream}},
	} {
		js := must(jetstream.New(c.conn.nc))
		for _, name := range c.streams {
			if _, err := js.Stream(ctx, name); err != nil {
				t.Fatalf("%s stream info %s: %v", c.conn.name, name, err)
			}
		}
	}
	// delivery consumes the event; ack-ingest the agent's ack and heartbeat.
	if got := consumeOne(t, del, protocol.EventsStream, protocol.ConfigChangedSubject); string(got) != `{"event":1}` {
		t.Fatalf("delivery consumed %q", got)
	}
	if err := agent.Publish(protocol.AckSubject("agent-a"), []byte(`{"ack":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := agent.Publish(protocol.HeartbeatSubject("agent-a"), []byte(`{"hb":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := consumeOne(t, ack, protocol.AcksStream, protocol.AckSubjectAll); string(got) != `{"ack":1}` {
		t.Fatalf("ack-ingest consumed ack %q", got)
	}
	if got := consumeOne(t, ack, protocol.HeartbeatsStream, protocol.HeartbeatSubjectAll); string(got) != `{"hb":1}` {
		t.Fatalf("ack-ingest consumed heartbeat %q", got)
	}
	// ack-ingest hands a repair request to delivery's queue group.
	repairs := must(del.nc.QueueSubscribeSync(protocol.RepairSubject, protocol.DeliveryQueueGroup))
	if err := del.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ack.nc.Publish(protocol.RepairSubject, []byte(`{"hosts":[]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := repairs.NextMsg(3 * time.Second); err != nil {
		t.Fatalf("repair request from ack-ingest to delivery: %v", err)
	}
	// A monitoring client gets the micro services' $SRV answers on its inbox.
	monitor := connect(t, ns, must(a.UnrestrictedCreds("monitor")), nats.CustomInboxPrefix(natsauth.MonitorInboxPrefix))
	for _, name := range []string{protocol.ResolverServiceName, protocol.CredentialServiceName, "delivery"} {
		if _, err := monitor.Request("$SRV.PING."+name, nil, 3*time.Second); err != nil {
			t.Fatalf("$SRV.PING.%s: %v", name, err)
		}
	}
	for _, c := range []serviceConn{api, res, cred, del, ack} {
		c.noErrors(t)
	}
}

// TestServiceUsersDenied proves each service user is refused what it must not do: the server answers
// with a permissions violation, and a spy subscribed to the subject receives nothing.
func TestServiceUsersDenied(t *testing.T) {
	a := must(natsauth.NewAuthority())
	ns := startServer(t, a)
	spy := connect(t, ns, must(a.UnrestrictedCreds("spy")))
	conns := map[string]serviceConn{}
	for _, name := range natsauth.ServiceNames {
		conns[name] = connectService(t, ns, a, name)
	}
	cmd := protocol.CommandSubject("agent-a")
	agentInbox := protocol.InboxPrefix("agent-a") + ".reply"
	deliveryInbox := natsauth.ServiceInboxPrefix(natsauth.DeliveryService) + ".reply"
	apiInbox := natsauth.ServiceInboxPrefix(natsauth.ConfigAPIService) + ".reply"
	pubDenied := map[string][]string{
		// Only delivery pushes to agents and asks for injection (config-api may answer agents' inboxes:
		// their credential renewals).
		natsauth.ConfigAPIService: {cmd, protocol.CredentialInjectSubject, deliveryInbox, protocol.FetchSubject("agent-a"),
			protocol.RepairSubject, protocol.ResolvePushSubject},
		// Only config-api asks the credential service to re-sign the NATS account.
		natsauth.ResolverService: {cmd, agentInbox, protocol.CredentialInjectSubject, protocol.CredentialCreateSubject,
			protocol.ConfigChangedSubject, protocol.ResolveSubject, protocol.AccountUpdateSubject, protocol.RepairSubject},
		natsauth.CredentialService: {cmd, agentInbox, protocol.CredentialInjectSubject, protocol.ResolveSubject, protocol.ConfigChangedSubject,
			protocol.AccountUpdateSubject, protocol.RepairSubject},
		// Only config-api manages credentials, streams and the account, and publishes events.
		natsauth.DeliveryService: {protocol.CredentialCreateSubject, protocol.CredentialRotateSubject, protocol.CredentialDeleteSubject,
			protocol.ConfigChangedSubject, apiInbox, "$JS.API.STREAM.UPDATE." + protocol.EventsStream,
			"$JS.API.STREAM.CREATE.EVIL", "$JS.API.CONSUMER.CREATE." + protocol.AcksStream + ".x", protocol.AccountUpdateSubject,
			protocol.RepairSubject, "$JS.API.CONSUMER.DELETE." + protocol.HeartbeatsStream + "." + protocol.HeartbeatsIngestDurable,
			protocol.ResolveSubject,
			// Stream info only of the stream it consumes.
			"$JS.API.STREAM.INFO." + protocol.AcksStream, "$JS.API.STREAM.INFO." + protocol.HeartbeatsStream, "$JS.API.STREAM.LIST"},
		// ack-ingest may not publish to agents at all.
		natsauth.AckIngestService: {cmd, agentInbox, protocol.FetchSubject("agent-a"), protocol.ConfigChangedSubject,
			protocol.CredentialInjectSubject, protocol.ResolveSubject, "$JS.API.STREAM.UPDATE." + protocol.AcksStream,
			"$JS.API.CONSUMER.CREATE." + protocol.EventsStream + ".x", protocol.AccountUpdateSubject, protocol.ResolvePushSubject,
			protocol.ResolveSetsSubject,
			// Stream info only of the streams it consumes.
			"$JS.API.STREAM.INFO." + protocol.EventsStream, "$JS.API.STREAM.INFO.EVIL", "$JS.API.STREAM.LIST"},
	}
	// Only config-api answers agents' credential renewals (the renewal request carries the agent's key).
	subDenied := map[string][]string{
		natsauth.ConfigAPIService: {natsauth.ServiceInboxPrefix(natsauth.DeliveryService) + ".>", "configsync.svc.credential.>",
			protocol.FetchSubjectAll, protocol.AccountUpdateSubject, "configsync.agent.>", protocol.RepairSubject},
		natsauth.ResolverService: {"configsync.svc.credential.>", protocol.AckSubjectAll, protocol.CredsRenewSubjectAll, protocol.RepairSubject},
		natsauth.CredentialService: {"configsync.svc.resolver.>", natsauth.ServiceInboxPrefix(natsauth.ConfigAPIService) + ".>", protocol.CredsRenewSubjectAll,
			protocol.RepairSubject},
		natsauth.DeliveryService: {natsauth.ServiceInboxPrefix(natsauth.ConfigAPIService) + ".>", protocol.HeartbeatSubjectAll, "configsync.svc.>",
			protocol.CredsRenewSubjectAll, protocol.CredsRenewSubject("agent-a")},
		natsauth.AckIngestService: {protocol.AckSubjectAll, protocol.HeartbeatSubjectAll, natsauth.ServiceInboxPrefix(natsauth.DeliveryService) + ".>",
			protocol.CredsRenewSubjectAll, protocol.RepairSubject},
	}
	for _, name := range natsauth.ServiceNames {
		c := conns[name]
		t.Run(name, func(t *testing.T) {
			for _, subj := range pubDenied[name] {
				watch := must(spy.SubscribeSync(subj))
				if err := spy.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := c.nc.Publish(subj, []byte("forged")); err != nil {
					t.Fatal(err)
				}
				c.errs.waitFor(t, `Permissions Violation for Publish to "`+subj+`"`)
				if m, err := watch.NextMsg(200 * time.Millisecond); err == nil {
					t.Fatalf("%s published %q to %s", name, m.Data, subj)
				}
				_ = watch.Unsubscribe()
			}
			// Every inbox and every subject, the same for all services.
			for _, subj := range append([]string{"_INBOX.>", ">", "configsync.cmd.*"}, subDenied[name]...) {
				sub := must(c.nc.SubscribeSync(subj))
				c.errs.waitFor(t, `Permissions Violation for Subscription to "`+subj+`"`)
				_ = sub.Unsubscribe()
			}
		})
	}
}

// TestAccountUpdateOnlyFromConfigAPI: with the credential service answering account updates, a request
// from any other service user is a permissions violation that the custodian never sees, while
// config-api's is answered.
func TestAccountUpdateOnlyFromConfigAPI(t *testing.T) {
	a := must(natsauth.NewAuthority())
	ns := startServer(t, a)
	cred := connectService(t, ns, a, natsauth.CredentialService)
	var mu sync.Mutex
	seen := 0
	sub := must(cred.nc.QueueSubscribe(protocol.AccountUpdateSubject, protocol.AccountUpdateQueueGroup, func(m *nats.Msg) {
		mu.Lock()
		seen++
		mu.Unlock()
		_ = m.Respond([]byte(`{"pushed":true}`))
	}))
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	cred.noErrors(t)
	for _, name := range []string{natsauth.DeliveryService, natsauth.AckIngestService, natsauth.ResolverService} {
		c := connectService(t, ns, a, name)
		if _, err := c.nc.Request(protocol.AccountUpdateSubject, []byte(`{"revocations":{},"force":true}`), 500*time.Millisecond); err == nil {
			t.Fatalf("%s's account update request was answered", name)
		}
		c.errs.waitFor(t, `Permissions Violation for Publish to "`+protocol.AccountUpdateSubject+`"`)
	}
	mu.Lock()
	if seen != 0 {
		t.Fatalf("the custodian received %d account updates from other services", seen)
	}
	mu.Unlock()
	api := connectService(t, ns, a, natsauth.ConfigAPIService)
	if _, err := api.nc.Request(protocol.AccountUpdateSubject, []byte(`{"revocations":{}}`), 3*time.Second); err != nil {
		t.Fatalf("config-api's account update: %v (errors %v)", err, api.errs.errs)
	}
	api.noErrors(t)
}

// TestServiceCredsUnknownName: only the services of the table get a user.
func TestServiceCredsUnknownName(t *testing.T) {
	a := must(natsauth.NewAuthority())
	if _, err := a.ServiceCreds("configsync-services"); err == nil {
		t.Fatal("an unknown service got a user")
	}
	for _, name := range natsauth.ServiceNames {
		p := must(natsauth.ServicePermissionOf(name))
		if len(p.Publish) == 0 || len(p.Subscribe) == 0 {
			t.Fatalf("%s: empty allow-list %+v", name, p)
		}
		// Only the services that answer agents (delivery: fetches; config-api: credential renewals) may
		// publish to agents' inboxes; no one may read them, nor everything.
		answersAgents := p.Service == natsauth.DeliveryService || p.Service == natsauth.ConfigAPIService
		for _, subj := range p.Publish {
			if subj == ">" || subj == "_INBOX.>" && !answersAgents {
				t.Fatalf("%s may publish %q", name, subj)
			}
		}
		for _, subj := range p.Subscribe {
			if subj == ">" || subj == "_INBOX.>" {
				t.Fatalf("%s may subscribe %q", name, subj)
			}
		}
	}
}

// TestAgentLimits: an agent user may publish at most AgentMaxPayload bytes (even on a server whose
// max_payload is larger) and hold at most AgentMaxSubscriptions subscriptions.
func TestAgentLimits(t *testing.T) {
	a := must(natsauth.NewAuthority())
	ns := startServerWith(t, a, func(o *server.Options) { o.MaxPayload = 4 << 20 })
	var errs asyncErrors
	agent := connect(t, ns, must(a.Issuer().IssueAgent("agent-a")), nats.ErrorHandler(errs.handler), nats.NoReconnect(),
		nats.CustomInboxPrefix(protocol.InboxPrefix("agent-a")))
	for i := range natsauth.AgentMaxSubscriptions + 1 {
		if _, err := agent.SubscribeSync(protocol.CommandSubject("agent-a")); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	errs.waitFor(t, "maximum subscriptions exceeded")

	// Within the limit is fine.
	ok := connect(t, ns, must(a.Issuer().IssueAgent("agent-c")))
	if err := ok.Publish(protocol.ObservationSubject("agent-c", "files"), make([]byte, natsauth.AgentMaxPayload)); err != nil {
		t.Fatal(err)
	}
	if err := ok.Flush(); err != nil {
		t.Fatalf("a message of exactly AgentMaxPayload bytes: %v", err)
	}

	closed := make(chan struct{})
	big := connect(t, ns, must(a.Issuer().IssueAgent("agent-b")), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	err := big.Publish(protocol.ObservationSubject("agent-b", "files"), make([]byte, natsauth.AgentMaxPayload+1))
	// A message this large is written through to the socket by Publish itself. The server closes the
	// connection as soon as it has read the PUB line, so the write can fail with a reset while the rest
	// of the payload is still going out: the server's answer to the same violation, seen mid-write.
	cutMidWrite := errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	if err != nil && !cutMidWrite {
		// The server may already have told the client the user's limit (an INFO after authentication):
		// then the client refuses the message itself. It is the user's limit, not the server's 4 MiB.
		if !errors.Is(err, nats.ErrMaxPayload) || big.MaxPayload() != natsauth.AgentMaxPayload {
			t.Fatalf("publish: %v (client max payload %d)", err, big.MaxPayload())
		}
		return
	}
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("an agent publishing more than AgentMaxPayload was not disconnected")
	}
	if cutMidWrite {
		return
	}
	if err := big.LastError(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "maximum payload") {
		t.Fatalf("last error %v, want a maximum payload violation", err)
	}
}

// TestAccountJetStreamLimits: the account refuses a stream without MaxBytes, one larger than
// AccountMaxStreamBytes, and streams beyond AccountStreams; ConfigSync's own streams fit.
func TestAccountJetStreamLimits(t *testing.T) {
	a := must(natsauth.NewAuthority())
	ns := startServer(t, a)
	nc := connect(t, ns, must(a.UnrestrictedCreds("operator")))
	js := must(jetstream.New(nc))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "UNBOUNDED", Subjects: []string{"unbounded.>"}}); err == nil {
		t.Fatal("a stream without MaxBytes was created")
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HUGE", Subjects: []string{"huge.>"}, MaxBytes: natsauth.AccountMaxStreamBytes + 1}); err == nil {
		t.Fatal("a stream over AccountMaxStreamBytes was created")
	}
	for _, cfg := range streamConfigs() {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatalf("ConfigSync stream %s: %v", cfg.Name, err)
		}
	}
	created := len(streamConfigs())
	var refused error
	for i := 0; i < natsauth.AccountStreams+1 && refused == nil; i++ {
		name := "EXTRA" + string(rune('A'+i))
		_, refused = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"extra." + name}, MaxBytes: 1 << 20})
		if refused == nil {
			created++
		}
	}
	if refused == nil || created != natsauth.AccountStreams {
		t.Fatalf("created %d streams (limit %d), last error %v", created, natsauth.AccountStreams, refused)
	}
}
