package postgres

import (
	"context"
	"testing"

	"github.com/configsync/configsync/libs/protocol/selector"
	"github.com/configsync/configsync/libs/testinfra"
)

// The hosts page's label filter in SQL (labelsPath, evaluated by `@?`) agrees with selector.Matches, the
// rule of the API's ?selector=, for every operator, missing and empty labels, and keys with / and .
func TestLabelsPathAgreesWithSelector(t *testing.T) {
	pool := testinfra.Postgres(t)
	labelSets := []selector.Labels{{}, {"role": "web"}, {"role": "db"}, {"role": ""}, {"canary": ""},
		{"role": "web", "region": "eu", "canary": ""}, {"region": "us"}, {"a/b.c": "x"}, {"role": "web-1.a_b"}}
	sels := []string{"role=web", "role==web", "role!=web", "role in (web,db)", "role notin (web)", "role notin (web,db)",
		"role", "!role", "canary", "!canary", "role=", "role!=", "role=web,region in (eu,us)", "role in (db),!canary",
		"a/b.c=x", "a/b.c", "role=web-1.a_b", "role=web,role=db", "role!=web,role!=db,!canary"}
	ctx := context.Background()
	for _, text := range sels {
		sel := selector.MustParse(text)
		path := labelsPath(sel)
		for _, l := range labelSets {
			var got bool
			if err := pool.QueryRow(ctx, `SELECT $1::jsonb @? $2::jsonpath`, l, path).Scan(&got); err != nil {
				t.Fatalf("selector %q as %q: %v", text, path, err)
			}
			if want := sel.Matches(l); got != want {
				t.Errorf("selector %q (%s) on %v: SQL %v, selector.Matches %v", text, path, l, got, want)
			}
		}
	}
}
