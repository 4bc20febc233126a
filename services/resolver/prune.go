package resolver

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/platform/app"
	"github.com/configsync/configsync/services/resolver/internal/resolve"
)

// pruneLoop runs one bounded pruning pass of stored statements every interval (the first one interval
// after start). Replicas prune independently: passes are idempotent deletes of bounded batches.
type pruneLoop struct {
	pruner   *resolve.Pruner
	interval time.Duration
	log      *zap.Logger

	loop app.Background
}

func newPruneLoop(p *resolve.Pruner, interval time.Duration, log *zap.Logger) *pruneLoop {
	return &pruneLoop{pruner: p, interval: interval, log: log}
}

func (l *pruneLoop) start() {
	if l != nil {
		l.loop.Start(l.run)
	}
}

func (l *pruneLoop) run(ctx context.Context) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pass, cancelPass := context.WithTimeout(ctx, l.interval)
		n, err := l.pruner.Prune(pass)
		cancelPass()
		switch {
		case err != nil && ctx.Err() == nil:
			l.log.Warn("pruning stored statements failed", zap.Int64("deleted", n), zap.Error(err))
		case n > 0:
			l.log.Info("pruned superseded statements", zap.Int64("deleted", n))
		}
	}
}

func (l *pruneLoop) stop() {
	if l != nil {
		_ = l.loop.Stop(context.Background()) // no deadline: a pass is bounded by the interval
	}
}
