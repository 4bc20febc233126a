package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// The online pages must select exactly the hosts protocol.Online calls online (the API and drift use
// it): the window, or three of the host's own reported heartbeat intervals when that is longer.
func TestOnlinePagesFollowProtocolOnline(t *testing.T) {
	ctx := context.Background()
	pool, db, store := newDB(t)
	env := db.Environment("prod")
	now := time.Now().UTC().Truncate(time.Millisecond)
	const window = 90 * time.Second
	type hostCase struct {
		age      time.Duration // since the last heartbeat; <0: never
		interval time.Duration // reported; 0: none
	}
	cases := []hostCase{
		{-1, 0}, {10 * time.Second, 0}, {90 * time.Second, 0}, {91 * time.Second, 0},
		{4 * time.Minute, 5 * time.Minute}, {14 * time.Minute, 5 * time.Minute}, {16 * time.Minute, 5 * time.Minute},
		{100 * time.Second, time.Second}, {2 * time.Second, time.Second}, {91 * time.Second, 31 * time.Second},
	}
	want := map[string]bool{}
	var ids []string
	for i, c := range cases {
		id := db.Host(env, fmt.Sprintf("h-%d", i), fmt.Sprintf("agent-%d", i))
		ids = append(ids, id)
		var last *time.Time
		if c.age >= 0 {
			l := now.Add(-c.age)
			last = &l
			db.Heartbeat(id, l)
		}
		if c.interval > 0 {
			if _, err := pool.Exec(ctx, `UPDATE hosts SET heartbeat_interval_ms = $2 WHERE id = $1`, id, c.interval.Milliseconds()); err != nil {
				t.Fatal(err)
			}
		}
		want[id] = protocol.Online(now, last, window, c.interval)
	}
	since := now.Add(-window)
	for _, listed := range []bool{false, true} {
		q := resolve.HostPageQuery{EnvironmentID: env, ConfigType: "labels", OnlineSince: &since, OnlineAt: &now, Limit: 100}
		if listed {
			q.HostIDs = ids
		}
		page, err := store.HostPage(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, h := range page {
			got[h.HostID] = true
		}
		for i, id := range ids {
			if got[id] != want[id] {
				t.Errorf("listed=%v host %d (%+v): selected %v, protocol.Online says %v", listed, i, cases[i], got[id], want[id])
			}
		}
	}
}
