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
	Hosts int `json:"hosts"`
	// Batches is the number of batch requests the hosts were registered in (retries not counted).
	Batches int `json:"batches"`
	// Concurrency is the most batch requests in flight.
	Concurrency int           `json:"concurrency"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	// Retries counts batch requests sent again after a transient failure.
	Retries int64 `json:"retries"`
	// PerSecond is Hosts / Elapsed.
	PerSecond float64 `json:"per_second"`
	// Credentials holds each agent's own NATS creds file by agent id, when RegisterHosts was asked to
	// keep them (the real-connection fleet connects with them). Never printed.
	Credentials map[string]string `json:"-"`
}

// RegisterHosts registers one host per agent id (hostname = agent id) through the batch route: chunks
// of up to MaxBatch hosts, at most concurrency of them in flight. The API registers a batch entirely
// or not at all, so a chunk that fails for a transient reason (no answer, 5xx, 429) is retried up to 5
// times, and a 409 on a retry means an earlier attempt landed. progress, when set, is called with the
// number of hosts registered so far after each chunk (from one goroutine at a time).
func (c *Client) RegisterHosts(ctx context.Context, environmentID string, agentIDs []string, concurrency int,
	progress func(done int), opts ...RegisterOption) (Registration, error) {
	return c.register(ctx, environmentID, agentIDs, concurrency, progress, nil, opts)
}

// RegisterOption changes what a registration sends.
type RegisterOption func(*registerOptions)

type registerOptions struct {
	labels map[string]map[string]string
}

// WithLabels gives hosts inventory labels at registration, by agent id (hosts not named get none).
func WithLabels(labels map[string]map[string]string) RegisterOption {
	return func(o *registerOptions) { o.labels = labels }
}

// RegisterHostsWithCredentials is RegisterHosts that also keeps every agent's NATS creds file (in
// Registration.Credentials). A batch that landed on an earlier attempt but answered 409 on a retry
// cannot give its credentials again: that is an error here.
func (c *Client) RegisterHostsWithCredentials(ctx context.Context, environmentID string, agentIDs []string, concurrency int,
	progress func(done int), opts ...RegisterOption) (Registration, error) {
	creds := make(map[string]string, len(agentIDs))
	var mu sync.Mutex
	reg, err := c.register(ctx, environmentID, agentIDs, concurrency, progress, func(ids []string, hosts []RegisteredHost) error {
		mu.Lock()
		defer mu.Unlock()
		if hosts == nil {
			return fmt.Errorf("registered on an earlier attempt: its NATS credentials are lost")
		}
		for i, h := range hosts {
			if h.NATSCredentials == "" {
				return fmt.Errorf("host %s registered without NATS credentials (config-api issues no per-agent identities)", ids[i])
			}
			creds[ids[i]] = h.NATSCredentials
		}
		return nil
	}, opts)
	reg.Credentials = creds
	return reg, err
}

// register registers agentIDs in chunks; keep, when set, gets every chunk's answer (nil when a retry
// found the chunk registered already).
func (c *Client) register(ctx context.Context, environmentID string, agentIDs []string, concurrency int,
	progress func(done int), keep func(ids []string, hosts []RegisteredHost) error, opts []RegisterOption) (Registration, error) {
	var o registerOptions
	for _, opt := range opts {
		opt(&o)
	}
	var chunks [][]string
	for start := 0; start < len(agentIDs); start += MaxBatch {
		chunks = append(chunks, agentIDs[start:min(start+MaxBatch, len(agentIDs))])
	}
	concurrency = max(1, min(concurrency, len(chunks)))
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next, retries atomic.Int64
		done          int
		firstErr      error
		errOnce       sync.Once
		progressMu    sync.Mutex
		wg            sync.WaitGroup
	)
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(chunks) || ctx.Err() != nil {
					return
				}
				n, hosts, err := c.registerChunk(ctx, environmentID, chunks[i], o.labels)
				retries.Add(int64(n))
				if err == nil && keep != nil {
					err = keep(chunks[i], hosts)
				}
				if err != nil {
					errOnce.Do(func() {
						firstErr = fmt.Errorf("register hosts %s … %s: %w", chunks[i][0], chunks[i][len(chunks[i])-1], err)
						cancel()
					})
					return
				}
				progressMu.Lock()
				done += len(chunks[i])
				if progress != nil {
					progress(done)
				}
				progressMu.Unlock()
			}
		}()
	}
	wg.Wait()
	r := Registration{Hosts: done, Batches: len(chunks), Concurrency: concurrency, Elapsed: time.Since(start), Retries: retries.Load()}
	if r.Elapsed > 0 {
		r.PerSecond = float64(r.Hosts) / r.Elapsed.Seconds()
	}
	return r, firstErr
}

func (c *Client) registerChunk(ctx context.Context, environmentID string, agentIDs []string, labels map[string]map[string]string) (retries int, registered []RegisteredHost, err error) {
	hosts := make([]HostSpec, len(agentIDs))
	// Loadgen names its simulated agents itself (they connect under those ids), which only an admin
	// token may do: agent ids are global NATS identities, so config-api generates them for client tokens.
	for i, id := range agentIDs {
		hosts[i] = HostSpec{Hostname: id, AgentID: id, Labels: labels[id]}
	}
	for attempt := 0; ; attempt++ {
		registered, err = c.RegisterHostBatch(ctx, environmentID, hosts)
		switch {
		case err == nil:
			return attempt, registered, nil
		case attempt > 0 && IsConflict(err):
			return attempt, nil, nil // an earlier attempt registered the whole batch
		case attempt >= 5 || !transient(err) || ctx.Err() != nil:
			return attempt, nil, err
		}
		select {
		case <-ctx.Done():
			return attempt, nil, ctx.Err()
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
