package testinfra

import (
	"testing"

	"go.uber.org/zap"
)

func TestLoggerRecordsEntries(t *testing.T) {
	var log *zap.Logger
	t.Run("inner", func(t *testing.T) {
		l, logs := Logger(t)
		l.Debug("debug entry")
		l.Info("relay started", zap.String("stream", "CONFIGSYNC_EVENTS"))
		if logs.Len() != 2 {
			t.Fatalf("observed %d entries, want 2", logs.Len())
		}
		got := logs.FilterMessage("relay started").All()
		if len(got) != 1 || got[0].ContextMap()["stream"] != "CONFIGSYNC_EVENTS" {
			t.Fatalf("entry fields not recorded: %+v", got)
		}
		log = l
	})
	// A straggler logging after its test finished must not panic.
	log.Info("late entry")
}
