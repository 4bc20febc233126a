package backendstats

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// SignaturesMetric is the resolver's counter of statements signed (one per distinct config and per
// host identity, never per fetch or push), by key id.
const SignaturesMetric = "configsync_resolver_signatures_total"

// Signatures scrapes a Prometheus text endpoint (the resolver's METRICS_ADDR, or devstack's) and
// returns the sum of SignaturesMetric over its key ids: 0 when the resolver signs nothing (the counter
// then has no series).
func Signatures(ctx context.Context, client *http.Client, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("scrape %s: HTTP %d", url, resp.StatusCode)
	}
	return sumCounter(resp.Body, SignaturesMetric)
}

// sumCounter sums the samples of one metric in Prometheus text format.
func sumCounter(r io.Reader, name string) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var sum float64
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // another metric sharing the prefix
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s sample %q: %w", name, line, err)
		}
		sum += v
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return int64(sum), nil
}
