package selflog

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

type sink struct {
	mu   sync.Mutex
	subj []string
	recs []protocol.LogRecord
}

func (s *sink) publish(subject string, data []byte) error {
	var r protocol.LogRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subj = append(s.subj, subject)
	s.recs = append(s.recs, r)
	return nil
}

func TestLevelVarChangesWhatIsLogged(t *testing.T) {
	var out bytes.Buffer
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelInfo)
	log, _ := New(&out, "json", lv, "a1")
	log.Debug("hidden detail")
	if strings.Contains(out.String(), "hidden detail") {
		t.Fatal("debug logged at info")
	}
	lv.Set(slog.LevelDebug)
	log.Debug("visible detail")
	if !strings.Contains(out.String(), "visible detail") {
		t.Fatal("debug not logged after the level change")
	}
	lv.Set(slog.LevelError)
	log.Warn("quiet warning")
	if strings.Contains(out.String(), "quiet warning") {
		t.Fatal("warn logged at error")
	}
}

func TestShipperTogglesAndFilters(t *testing.T) {
	var out bytes.Buffer
	lv := new(slog.LevelVar)
	log, sh := New(&out, "text", lv, "a1")
	s := &sink{}
	sh.SetPublisher(s.publish)
	log.Error("before enable")
	if len(s.recs) != 0 {
		t.Fatal("shipped while disabled")
	}
	sh.Apply(true, slog.LevelWarn)
	l := log.With("component", "metrics").WithGroup("g")
	l.Info("info not shipped")
	l.Warn("warn shipped", "n", 3, "err", errString("boom"))
	lv.Set(slog.LevelError) // console quieter than the shipper: the shipper still gets warn
	log.Warn("shipped but not printed")
	sh.Apply(true, slog.LevelDebug)
	log.Debug("debug shipped")
	sh.Apply(false, slog.LevelDebug)
	log.Error("after disable")

	if len(s.recs) != 3 {
		t.Fatalf("shipped %d records: %+v", len(s.recs), s.recs)
	}
	r := s.recs[0]
	if s.subj[0] != protocol.LogsSubject("a1") || r.AgentID != "a1" || r.Level != "warn" || r.Message != "warn shipped" {
		t.Fatalf("record %+v on %s", r, s.subj[0])
	}
	if r.Attrs["component"] != "metrics" || r.Attrs["g.n"] != float64(3) || r.Attrs["g.err"] != "boom" {
		t.Fatalf("attrs %+v", r.Attrs)
	}
	if s.recs[2].Level != "debug" {
		t.Fatalf("third %+v", s.recs[2])
	}
	if strings.Contains(out.String(), "shipped but not printed") {
		t.Fatal("console printed below its level")
	}
	if shipped, _ := sh.Stats(); shipped != 3 {
		t.Fatalf("stats %d", shipped)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{"debug": slog.LevelDebug, "INFO": slog.LevelInfo, "warn": slog.LevelWarn, "warning": slog.LevelWarn, "error": slog.LevelError} {
		if got, err := ParseLevel(in); err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseLevel("loud"); err == nil {
		t.Error("bad level accepted")
	}
}
