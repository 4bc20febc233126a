package backendstats

import (
	"strings"
	"testing"
)

func TestSumCounter(t *testing.T) {
	text := `# HELP configsync_resolver_signatures_total Statements signed.
# TYPE configsync_resolver_signatures_total counter
configsync_resolver_signatures_total{key_id="local-a"} 1003
configsync_resolver_signatures_total{key_id="vault-k-v2"} 2
configsync_resolver_signatures_total_extra 7
configsync_resolver_signatures_totally{x="y"} 9
`
	n, err := sumCounter(strings.NewReader(text), SignaturesMetric)
	if err != nil || n != 1005 {
		t.Fatalf("sum = %d, %v; want 1005", n, err)
	}
	if n, err := sumCounter(strings.NewReader("other_metric 3\n"), SignaturesMetric); err != nil || n != 0 {
		t.Fatalf("no series: %d, %v; want 0", n, err)
	}
	if _, err := sumCounter(strings.NewReader(SignaturesMetric+`{key_id="a"} nope`+"\n"), SignaturesMetric); err == nil {
		t.Fatal("a malformed sample was summed")
	}
}
