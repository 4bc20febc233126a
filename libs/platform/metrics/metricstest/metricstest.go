// Package metricstest scrapes a /metrics endpoint in tests and reads values from the parsed text
// exposition, so tests assert that a metric moved by comparing two scrapes.
package metricstest

import (
	"context"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one parsed scrape: families by name.
type Scrape map[string]*dto.MetricFamily

// Get scrapes url (the text format) and parses it, failing t on any error.
func Get(t testing.TB, url string) Scrape {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse scrape of %s: %v", url, err)
	}
	return fams
}

// Value is the value of the series of family name whose labels include want: a counter's or gauge's
// value, a histogram's sample count. The values of several matching series are summed; 0 when none
// matches.
func (s Scrape) Value(name string, want map[string]string) float64 {
	f := s[name]
	if f == nil {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		if !matches(m, want) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		case m.Summary != nil:
			sum += float64(m.Summary.GetSampleCount())
		}
	}
	return sum
}

// Sum is a histogram's sample sum over the matching series.
func (s Scrape) Sum(name string, want map[string]string) float64 {
	var sum float64
	if f := s[name]; f != nil {
		for _, m := range f.GetMetric() {
			if matches(m, want) && m.Histogram != nil {
				sum += m.Histogram.GetSampleSum()
			}
		}
	}
	return sum
}

// Has reports whether family name has a series whose labels include want.
func (s Scrape) Has(name string, want map[string]string) bool {
	if f := s[name]; f != nil {
		for _, m := range f.GetMetric() {
			if matches(m, want) {
				return true
			}
		}
	}
	return false
}

// Series counts the series of every family whose name starts with prefix (a histogram counts as one).
func (s Scrape) Series(prefix string) int {
	n := 0
	for name, f := range s {
		if strings.HasPrefix(name, prefix) {
			n += len(f.GetMetric())
		}
	}
	return n
}

// Labels returns every label value set of family name.
func (s Scrape) Labels(name string) []map[string]string {
	var out []map[string]string
	if f := s[name]; f != nil {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out = append(out, maps.Clone(l))
		}
	}
	return out
}

func matches(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, p := range m.GetLabel() {
		if v, ok := want[p.GetName()]; ok {
			if v != p.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// Eventually polls cond until it holds, failing t after 30 seconds (a bound for a hung test, not a
// timing assertion).
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
