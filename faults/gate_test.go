package faults_test

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// pageGate is a pgx query tracer for the resolver's pool that can hold the resolver's push page
// queries (sqlc names HostPage, OnlineHostPage, ListedHostPage). Armed with n, it lets n more page queries through and then holds
// every further one until released: with delivery's page size at 1 host, that stops an environment
// fan-out after exactly n hosts, at a point the test chooses, without any timing.
type pageGate struct {
	mu      sync.Mutex
	armed   bool
	allow   int
	held    int
	release chan struct{}
}

func newPageGate() *pageGate { return &pageGate{release: make(chan struct{})} }

// arm lets n more page queries run and holds the ones after them.
func (g *pageGate) arm(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.allow = true, n
	g.release = make(chan struct{})
}

// open releases every held query and lets all later ones run.
func (g *pageGate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.armed {
		g.armed = false
		close(g.release)
	}
}

// holding reports how many page queries are held right now.
func (g *pageGate) holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

func (g *pageGate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if !isHostPageQuery(data.SQL) {
		return ctx
	}
	g.mu.Lock()
	if !g.armed || g.allow > 0 {
		if g.armed {
			g.allow--
		}
		g.mu.Unlock()
		return ctx
	}
	g.held++
	rel := g.release
	g.mu.Unlock()
	select {
	case <-rel:
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.held--
	g.mu.Unlock()
	return ctx
}

func (g *pageGate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// isHostPageQuery recognises the resolver's push page queries by their sqlc name comment.
func isHostPageQuery(sql string) bool {
	for _, name := range []string{"HostPage", "OnlineHostPage", "ListedHostPage"} {
		if strings.Contains(sql, "-- name: "+name+" ") {
			return true
		}
	}
	return false
}
