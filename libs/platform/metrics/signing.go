package metrics

import "github.com/prometheus/client_golang/prometheus"

// SignObserver counts the statements the resolver signs, by key id (a handful of ids: the keys of the
// config authority, never host or tenant ids).
type SignObserver interface {
	Signed(keyID string, n int)
}

// Signatures is the SignObserver of a Metrics.
type Signatures struct {
	total *prometheus.CounterVec
}

// Signatures returns the signature counter (configsync_resolver_signatures_total{key_id}); nil m
// returns nil (a nil *Signatures records nothing).
func (m *Metrics) Signatures() *Signatures {
	if m == nil {
		return nil
	}
	return &Signatures{total: RegisterCounterVec(m, "resolver", "signatures_total",
		"Statements signed by the resolver, by key id: one per distinct effective config and per host identity, never per fetch or push.",
		"key_id")}
}

// Signed counts n signatures made with keyID.
func (s *Signatures) Signed(keyID string, n int) {
	if s == nil {
		return
	}
	s.total.WithLabelValues(keyID).Add(float64(n))
}
