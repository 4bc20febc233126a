package resolve

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// StatementPruner deletes stored statements that can no longer be served.
type StatementPruner interface {
	// PruneConfigStatements deletes up to limit config statements created before before that are
	// superseded (a newer version of the same scope and type is stored) or belong to a host that no
	// longer exists, and returns how many it deleted.
	PruneConfigStatements(ctx context.Context, before time.Time, limit int) (int64, error)
}

// Pruning defaults.
const (
	DefaultStatementRetention = 7 * 24 * time.Hour
	DefaultPruneBatch         = 1000
	DefaultPruneBatches       = 10
)

// Pruner keeps config_statements from piling up: every version ever signed is stored, and only the
// newest of each (scope, type) is served (an older one only to hosts a staged rollout holds back).
// One Prune deletes superseded statements older than Retention, Batch rows per statement and at most
// Batches statements, so a backlog is worked off over several runs without a long transaction. A
// statement pruned and asked for again is signed again on demand (one signature, then kept for a
// retention): pruning never makes a config unservable.
type Pruner struct {
	Store     StatementPruner
	Retention time.Duration // default DefaultStatementRetention
	Batch     int           // default DefaultPruneBatch
	Batches   int           // default DefaultPruneBatches
	Now       func() time.Time
}

// Prune runs one bounded pass and returns how many statements it deleted.
func (p *Pruner) Prune(ctx context.Context) (int64, error) {
	if p == nil || p.Store == nil {
		return 0, errors.New("resolve: pruner without a store")
	}
	retention, batch, batches := p.Retention, p.Batch, p.Batches
	if retention <= 0 {
		retention = DefaultStatementRetention
	}
	if batch <= 0 {
		batch = DefaultPruneBatch
	}
	if batches <= 0 {
		batches = DefaultPruneBatches
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	before := now().Add(-retention)
	var total int64
	for range batches {
		n, err := p.Store.PruneConfigStatements(ctx, before, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("prune statements: %w", err)
		}
		if n < int64(batch) {
			break
		}
	}
	return total, nil
}
