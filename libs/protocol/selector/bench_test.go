package selector

import (
	"fmt"
	"testing"
)

// BenchmarkMatch10000 matches a typical selector against 10,000 hosts' labels (the work one host
// listing or drift check with ?selector= does over a 10,000-host environment, besides the queries).
func BenchmarkMatch10000(b *testing.B) {
	sel := MustParse("role=web,region in (eu,us),!canary,tier notin (bronze)")
	hosts := make([]Labels, 10_000)
	for i := range hosts {
		hosts[i] = Labels{"role": []string{"web", "db"}[i%2], "region": []string{"eu", "us", "ap"}[i%3],
			"tier": fmt.Sprintf("t%d", i%4), "rack": fmt.Sprintf("r%03d", i%100)}
	}
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		for _, l := range hosts {
			if sel.Matches(l) {
				n++
			}
		}
		if n == 0 {
			b.Fatal("no host matched")
		}
	}
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("role=web,region in (eu,us),!canary,tier notin (bronze)"); err != nil {
			b.Fatal(err)
		}
	}
}
