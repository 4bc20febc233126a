package configapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Registration is what RegisterHosts did.
type Registration struct {
	Hosts       int           `json:"hosts"`
	Concurrency int           `json:"concurrency"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	Retries     int64         `json:"retries"`
	// PerSecond is Hosts / Elapsed.
	PerSecond float64 `json:"per_second"`
}

// RegisterHosts registers one host per agent id (hostname = agent id) with at most concurrency
// requests in flight; the API has no bulk registration route. A request that fails for a transient
// reason (no answer, 5xx, 429) is retried up to 5 times; a 409 on a retry means the first attempt
// landed. progress, when set, is called with the number of hosts registered so far (from one
// goroutine at a time, at most every 100 hosts).
func (c *Client) RegisterHosts(ctx context.Context, environmentID string, agentIDs []string, concurrency int,
	progress func(done int)) (Registration, error) {
	concurrency = max(1, concurrency)
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next, done, retries atomic.Int64
		firstErr            error
		errOnce             sync.Once
		progressMu          sync.Mutex
		wg                  sync.WaitGroup
	)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(agentIDs) || ctx.Err() != nil {
					return
				}
				n, err := c.registerOne(ctx, environmentID, agentIDs[i])
				retries.Add(int64(n))
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("register %s: %w", agentIDs[i], err); cancel() })
					return
				}
				if d := int(done.Add(1)); progress != nil && (d%100 == 0 || d == len(agentIDs)) {
					progressMu.Lock()
					progress(d)
					progressMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	r := Registration{Hosts: int(done.Load()), Concurrency: concurrency, Elapsed: time.Since(start), Retries: retries.Load()}
	if r.Elapsed > 0 {
		r.PerSecond = float64(r.Hosts) / r.Elapsed.Seconds()
	}
	return r, firstErr
}

func (c *Client) registerOne(ctx context.Context, environmentID, agentID string) (retries int, err error) {
	for attempt := 0; ; attempt++ {
		_, err = c.RegisterHost(ctx, environmentID, agentID, agentID)
		switch {
		case err == nil:
			return attempt, nil
		case attempt > 0 && IsConflict(err):
			return attempt, nil // an earlier attempt registered it
		case attempt >= 5 || !transient(err) || ctx.Err() != nil:
			return attempt, err
		}
		select {
		case <-ctx.Done():
			return attempt, ctx.Err()
		case <-time.After(time.Duration(50<<attempt) * time.Millisecond):
		}
	}
}

func transient(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 500 || ae.Status == http.StatusTooManyRequests
	}
	return true // transport errors
}
