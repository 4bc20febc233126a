package outbox

import (
	"context"
	"testing"
)

// BenchmarkRelay measures end-to-end relay throughput: committed rows to JetStream PubAcks plus the
// marking commit, one relay, default batch size.
func BenchmarkRelay(b *testing.B) {
	e := setupB(b)
	r := NewRelay(e.pool, e.js, e.log, RelayOptions{})
	insertB(b, e, b.N)
	b.ResetTimer()
	left := b.N
	for left > 0 {
		n, err := r.RelayOnce(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		left -= n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func insertB(b *testing.B, e env, n int) {
	b.Helper()
	for n > 0 {
		batch := min(n, 1000)
		insert(b, e.pool, batch)
		n -= batch
	}
}
