// Package health defines readiness checks: named probes of a dependency (PostgreSQL, NATS, ...) that the
// HTTP server's /readyz runs. Platform modules contribute their checks to the fx value group "readiness".
package health

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Check is one readiness probe. Func returns nil when the dependency is usable.
type Check struct {
	Name string
	Func func(context.Context) error
}

// Result is the outcome of one Check.
type Result struct {
	Name     string        `json:"name"`
	OK       bool          `json:"ok"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// Run runs every check concurrently, each bounded by timeout, and returns the results in the order of
// checks and whether all passed. A panicking check counts as failed.
func Run(ctx context.Context, checks []Check, timeout time.Duration) ([]Result, bool) {
	results := make([]Result, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Go(func() {
			results[i] = runOne(ctx, c, timeout)
		})
	}
	wg.Wait()
	ok := true
	for _, r := range results {
		ok = ok && r.OK
	}
	return results, ok
}

func runOne(ctx context.Context, c Check, timeout time.Duration) (res Result) {
	res.Name = c.Name
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			res.OK, res.Error = false, fmt.Sprintf("check panicked: %v", p)
		}
		res.Duration = time.Since(start)
	}()
	if c.Func == nil {
		res.Error = "check has no function"
		return res
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Func(ctx); err != nil {
		res.Error = err.Error()
		return res
	}
	res.OK = true
	return res
}
