package configapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/libs/testinfra"
)

// The SQL function host_online (migration 00012), which every config-api query deciding "online" calls,
// is protocol.Online: same answers on both sides of each boundary, the window's and the host's own
// intervals', for hosts never seen and hosts without a reported interval.
func TestHostOnlineSQLAgreesWithProtocolOnline(t *testing.T) {
	pool := testinfra.Postgres(t)
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// In a zone with daylight saving, where adding a day-long interval to a timestamp would not be
	// adding 24 hours.
	if _, err := conn.Exec(context.Background(), `SET TIME ZONE 'Europe/Berlin'`); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC) // a daylight-saving change in much of Europe
	ago := func(d time.Duration) *time.Time { v := at.Add(-d); return &v }
	window := 90 * time.Second
	cases := []struct {
		name     string
		last     *time.Time
		interval time.Duration // 0: none reported
		window   time.Duration
	}{
		{"never seen", nil, 0, window},
		{"never seen, interval reported", nil, 10 * time.Second, window},
		{"just now", ago(0), 0, window},
		{"at the window", ago(window), 0, window},
		{"a microsecond past the window", ago(window + time.Microsecond), 0, window},
		{"past the window, short interval", ago(window + time.Second), 10 * time.Second, window},
		{"within 3 of its own long intervals", ago(14 * time.Minute), 5 * time.Minute, window},
		{"at 3 of its own intervals", ago(15 * time.Minute), 5 * time.Minute, window},
		{"just past 3 of its own intervals", ago(15*time.Minute + time.Microsecond), 5 * time.Minute, window},
		{"a day-long interval over the clock change", ago(70 * time.Hour), 24 * time.Hour, window},
		{"past 3 day-long intervals", ago(72*time.Hour + time.Second), 24 * time.Hour, window},
		{"a long window", ago(2 * time.Hour), 0, 3 * time.Hour},
		{"in the future (clock skew)", ago(-time.Minute), 0, window},
	}
	for _, c := range cases {
		var ms *int64
		if c.interval > 0 {
			v := c.interval.Milliseconds()
			ms = &v
		}
		var got bool
		err := conn.QueryRow(context.Background(), `SELECT host_online($1, $2, $3, $4)`,
			c.last, ms, pgtype.Interval{Microseconds: c.window.Microseconds(), Valid: true}, at).Scan(&got)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if want := protocol.Online(at, c.last, c.window, c.interval); got != want {
			t.Errorf("%s: host_online = %v, protocol.Online = %v", c.name, got, want)
		}
	}
}
