package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/nats-io/nats.go"
)

// replyMux lets the agents multiplexed on one connection each receive fetch replies on their own inbox
// prefix (_INBOX.<agent_id>.), as a real agent does: delivery answers a fetch only there. One wildcard
// subscription per connection routes every reply to the request waiting for it.
type replyMux struct {
	nc   *nats.Conn
	tag  string // unique per connection, so two loadgen processes never read each other's replies
	next atomic.Uint64

	mu      sync.Mutex
	waiting map[string]chan *nats.Msg
	sub     *nats.Subscription
}

func newReplyMux(nc *nats.Conn) (*replyMux, error) { return newScopedReplyMux(nc, "*") }

// newScopedReplyMux is a replyMux whose subscription covers the inbox prefix of agent only ("*": every
// agent's), the most a connection under that agent's own NATS user may subscribe to.
func newScopedReplyMux(nc *nats.Conn, agent string) (*replyMux, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	m := &replyMux{nc: nc, tag: "lg" + hex.EncodeToString(b[:]), waiting: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe("_INBOX."+agent+"."+m.tag+".*", m.deliver)
	if err != nil {
		return nil, err
	}
	m.sub = sub
	return m, nil
}

func (m *replyMux) deliver(msg *nats.Msg) {
	token := msg.Subject[strings.LastIndexByte(msg.Subject, '.')+1:]
	m.mu.Lock()
	ch := m.waiting[token]
	delete(m.waiting, token)
	m.mu.Unlock()
	if ch != nil {
		ch <- msg
	}
}

// request publishes data on subject with a reply inbox under agentID's prefix and waits for the answer,
// at most timeout (then it returns context.DeadlineExceeded, as a request under a context with that
// timeout does; a timer is cheaper than a context per fetch).
func (m *replyMux) request(timeout time.Duration, agentID, subject string, data []byte) (*nats.Msg, error) {
	token := strconv.FormatUint(m.next.Add(1), 36)
	ch := make(chan *nats.Msg, 1)
	m.mu.Lock()
	m.waiting[token] = ch
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.waiting, token)
		m.mu.Unlock()
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	if err := m.nc.PublishRequest(subject, protocol.InboxPrefix(agentID)+"."+m.tag+"."+token, data); err != nil {
		return nil, err
	}
	select {
	case msg := <-ch:
		// The server answers a request nobody subscribes to with a status-only message.
		if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			return nil, nats.ErrNoResponders
		}
		return msg, nil
	case <-timer.C:
		return nil, context.DeadlineExceeded
	}
}

func (m *replyMux) close() { _ = m.sub.Unsubscribe() }
