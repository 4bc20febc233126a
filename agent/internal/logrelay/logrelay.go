// Package logrelay carries Fluent Bit's records to NATS over the agent's own connection. Fluent Bit's
// nats output speaks neither TLS nor NATS credentials, and the servers accept only TLS clients with a
// user, so the rendered Fluent Bit config sends records with its http output to this relay on the
// loopback interface; the relay publishes each batch on the record tag's subject (the agent's
// configsync.agent.<id>.applogs.<name>), which the agent's NATS user may publish. Batches larger than
// the agent's payload limit are split by record; a record larger than the limit alone is dropped.
package logrelay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"
)

// DefaultAddr is where the relay listens unless configured otherwise: loopback only, a fixed port so a
// Fluent Bit started once keeps finding it across agent restarts.
const DefaultAddr = "127.0.0.1:24280"

// Path is the URI Fluent Bit posts to; TagHeader carries the records' tag (Fluent Bit's Header_Tag).
const (
	Path      = "/logs"
	TagHeader = "X-Fluent-Tag"
)

// maxBody bounds one request (Fluent Bit flushes chunks of at most a few MiB).
const maxBody = 16 << 20

// Publisher publishes data on subject (the agent's NATS client).
type Publisher func(subject string, data []byte) error

// Relay is the loopback HTTP listener.
type Relay struct {
	prefix     string
	maxPayload func() int
	publish    Publisher
	log        *slog.Logger
	ln         net.Listener
	srv        *http.Server
	done       chan struct{}
}

// DefaultMaxPayload is the message size used while the connection has not told its limit.
const DefaultMaxPayload = 1 << 20

// Start listens on addr and relays records whose tag starts with prefix+"." (the renderer's tag
// prefix), publishing at most maxPayload() bytes per message (the connection's limit; 0 or less:
// DefaultMaxPayload).
func Start(addr, prefix string, maxPayload func() int, publish Publisher, log *slog.Logger) (*Relay, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Relay{prefix: prefix + ".", maxPayload: maxPayload, publish: publish, log: log, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, r.handle)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("log relay stopped", "error", err)
		}
	}()
	return r, nil
}

// Addr is the address the relay listens on.
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Close stops the relay, letting requests in flight finish within ctx.
func (r *Relay) Close(ctx context.Context) error {
	err := r.srv.Shutdown(ctx)
	<-r.done
	return err
}

func (r *Relay) handle(w http.ResponseWriter, req *http.Request) {
	tag := req.Header.Get(TagHeader)
	if !strings.HasPrefix(tag, r.prefix) || !validSubjectTail(tag[len(r.prefix):]) {
		http.Error(w, "tag is not one of this agent's log tags", http.StatusForbidden)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxBody+1))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if len(body) > maxBody {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	limit := r.maxPayload()
	if limit <= 0 {
		limit = DefaultMaxPayload
	}
	// Room for the protocol line and headers the client adds to the payload.
	limit -= 1 << 10
	msgs, dropped, err := split(body, limit)
	if err != nil {
		http.Error(w, "body is not a JSON array of records", http.StatusBadRequest)
		return
	}
	if dropped > 0 {
		r.log.Warn("log records over the NATS payload limit dropped", "tag", tag, "records", dropped, "limit", limit)
	}
	for _, m := range msgs {
		if err := r.publish(tag, m); err != nil {
			// Fluent Bit retries the chunk; records already published may then arrive twice.
			r.log.Warn("log relay publish failed", "tag", tag, "error", err)
			http.Error(w, "NATS unavailable", http.StatusServiceUnavailable)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// split turns a JSON array of records into JSON arrays of at most limit bytes each; records that alone
// exceed limit are counted as dropped.
func split(body []byte, limit int) (msgs [][]byte, dropped int, err error) {
	var records []json.RawMessage
	if err := json.Unmarshal(body, &records); err != nil {
		return nil, 0, err
	}
	var cur bytes.Buffer
	flush := func() {
		if cur.Len() > 0 {
			cur.WriteByte(']')
			msgs = append(msgs, bytes.Clone(cur.Bytes()))
			cur.Reset()
		}
	}
	for _, rec := range records {
		if len(rec)+2 > limit {
			dropped++
			continue
		}
		if cur.Len() > 0 && cur.Len()+1+len(rec)+1 > limit {
			flush()
		}
		if cur.Len() == 0 {
			cur.WriteByte('[')
		} else {
			cur.WriteByte(',')
		}
		cur.Write(rec)
	}
	flush()
	return msgs, dropped, nil
}

// validSubjectTail: one or more dot-separated tokens of letters, digits, '-' and '_' (no wildcards,
// no empty token), so a tag can only name a subject under the prefix.
func validSubjectTail(s string) bool {
	if s == "" {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
