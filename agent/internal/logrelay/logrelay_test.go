package logrelay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type published struct {
	mu   sync.Mutex
	msgs map[string][][]byte
	fail bool
}

func (p *published) publish(subject string, data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail {
		return errors.New("nats: connection closed")
	}
	if p.msgs == nil {
		p.msgs = map[string][][]byte{}
	}
	p.msgs[subject] = append(p.msgs[subject], bytes.Clone(data))
	return nil
}

const prefix = "configsync.agent.a1.applogs"

func startRelay(t *testing.T, limit int) (*Relay, *published) {
	t.Helper()
	p := &published{}
	r, err := Start("127.0.0.1:0", prefix, func() int { return limit }, p.publish, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = r.Close(ctx)
	})
	return r, p
}

// post sends a body as Fluent Bit's http output does (Format json, Header_Tag X-Fluent-Tag).
func post(t *testing.T, r *Relay, tag string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+r.Addr()+Path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TagHeader, tag)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestRelayPublishesOnTheTagSubject(t *testing.T) {
	r, p := startRelay(t, 1<<20)
	body := []byte(`[{"date":1733000000.5,"log":"GET / 200"},{"date":1733000001.0,"log":"GET /x 404"}]`)
	if code := post(t, r, prefix+".nginx", body); code != http.StatusNoContent {
		t.Fatalf("status %d", code)
	}
	got := p.msgs[prefix+".nginx"]
	if len(got) != 1 {
		t.Fatalf("published %v", p.msgs)
	}
	var recs []map[string]any
	if err := json.Unmarshal(got[0], &recs); err != nil || len(recs) != 2 || recs[1]["log"] != "GET /x 404" {
		t.Fatalf("published %s (%v)", got[0], err)
	}
}

func TestRelayRefusesOtherSubjects(t *testing.T) {
	r, p := startRelay(t, 1<<20)
	for _, tag := range []string{"configsync.agent.other.applogs.x", prefix, prefix + ".*", prefix + ".>", prefix + "..x", "configsync.cmd.a1", prefix + ".a b"} {
		if code := post(t, r, tag, []byte(`[{"log":"x"}]`)); code != http.StatusForbidden {
			t.Errorf("tag %q: status %d, want 403", tag, code)
		}
	}
	if code := post(t, r, prefix+".x", []byte(`{"not":"an array"}`)); code != http.StatusBadRequest {
		t.Errorf("non-array body: status %d", code)
	}
	if len(p.msgs) != 0 {
		t.Fatalf("published %v", p.msgs)
	}
}

// A batch larger than the payload limit is split by record, in order; a record over the limit alone is
// dropped; each message stays within the limit.
func TestRelaySplitsLargeBatches(t *testing.T) {
	const limit = 4 << 10
	r, p := startRelay(t, limit)
	var recs []string
	for i := range 40 {
		recs = append(recs, `{"n":`+strings.Repeat(" ", 200)+strconv.Itoa(i)+`}`)
	}
	recs = append(recs, `{"huge":"`+strings.Repeat("x", limit)+`"}`)
	if code := post(t, r, prefix+".app", []byte("["+strings.Join(recs, ",")+"]")); code != http.StatusNoContent {
		t.Fatalf("status %d", code)
	}
	msgs := p.msgs[prefix+".app"]
	if len(msgs) < 2 {
		t.Fatalf("%d messages, want the batch split", len(msgs))
	}
	n := 0
	for _, m := range msgs {
		if len(m) > limit {
			t.Fatalf("message of %d bytes over the limit %d", len(m), limit)
		}
		var part []struct{ N int }
		if err := json.Unmarshal(m, &part); err != nil {
			t.Fatal(err)
		}
		for _, rec := range part {
			if rec.N != n {
				t.Fatalf("record %d out of order (want %d)", rec.N, n)
			}
			n++
		}
	}
	if n != 40 {
		t.Fatalf("%d records relayed, want 40 (the oversized one dropped)", n)
	}
}

// Without NATS the relay answers 503, so Fluent Bit keeps the chunk and retries.
func TestRelayUnavailableWithoutNATS(t *testing.T) {
	r, p := startRelay(t, 1<<20)
	p.fail = true
	if code := post(t, r, prefix+".x", []byte(`[{"log":"x"}]`)); code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", code)
	}
}
