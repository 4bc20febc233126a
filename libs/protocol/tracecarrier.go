package protocol

// HeaderCarrier lets OpenTelemetry's propagators read and write the trace context ("traceparent",
// "tracestate") in NATS message headers: HeaderCarrier(msg.Header). NATS header keys are
// case-sensitive, while OTel's HTTP carrier canonicalises them ("Traceparent"), which a reader looking
// up "traceparent" would miss; this carrier keeps keys exactly as the propagator writes them. It
// satisfies propagation.TextMapCarrier without importing OpenTelemetry, so the agent and the services
// share it.
type HeaderCarrier map[string][]string

// Get returns the first value of key (exact case), or "".
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key (exact case).
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the header keys.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
