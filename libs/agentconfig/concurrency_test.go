package agentconfig

import (
	"encoding/json"
	"sync"
	"testing"
)

// The package reuses parse buffers through pools; concurrent callers must still get independent,
// correct results (run with -race).
func TestConcurrentUse(t *testing.T) {
	env, host := benchCollectors()
	wantMerged, wantProv, err := Merge(Collectors, env, host)
	if err != nil {
		t.Fatal(err)
	}
	wantCanon := canon(t, wantMerged)
	wantHash := ConfigHash([]CacheEntry{{ConfigType: Collectors, ConfigData: wantMerged}})

	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				merged, prov, err := Merge(Collectors, env, host)
				if err != nil || string(merged) != string(wantMerged) || len(prov.Entries) != len(wantProv.Entries) {
					errs <- "merge differs"
					return
				}
				if c, err := Canonicalize(merged); err != nil || string(c) != wantCanon {
					errs <- "canonical form differs"
					return
				}
				if h := ConfigHash([]CacheEntry{{ConfigType: Collectors, ConfigData: merged}}); h != wantHash {
					errs <- "hash differs"
					return
				}
				doc := json.RawMessage(validConfigs[TypeNames()[g%len(typeNames)]][0])
				if err := Validate(TypeNames()[g%len(typeNames)], doc); err != nil {
					errs <- err.Error()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
