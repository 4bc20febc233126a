// Package otlpsink is an in-process OTLP/HTTP trace receiver: it accepts what otlptracehttp exports
// (protobuf, optionally gzip) on /v1/traces and keeps a summary of every span. The e2e test points
// the services at it to see one trace end to end, and tools/devstack runs it to measure the cost of
// tracing at ratio 1.0 without an external collector.
package otlpsink

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// maxBody bounds one export request.
const maxBody = 16 << 20

// Span is one received span.
type Span struct {
	Service, Name             string
	TraceID, SpanID, ParentID string
	Start, End                time.Time
}

// Sink receives spans; Keep false counts them without keeping them (for load measurements).
type Sink struct {
	Keep bool

	mu       sync.Mutex
	spans    []Span
	received int
	srv      *http.Server
	ln       net.Listener
}

// Start listens on addr ("127.0.0.1:0" for any port) and serves until Close.
func Start(addr string, keep bool) (*Sink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &Sink{Keep: keep, ln: ln}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", s.export)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Endpoint is the value for OTEL_EXPORTER_OTLP_ENDPOINT.
func (s *Sink) Endpoint() string { return "http://" + s.ln.Addr().String() }

// Close stops the listener.
func (s *Sink) Close() error { return s.srv.Close() }

// Received is how many spans arrived.
func (s *Sink) Received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

// Spans returns the kept spans of traceID ("": all).
func (s *Sink) Spans(traceID string) []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Span
	for _, sp := range s.spans {
		if traceID == "" || sp.TraceID == traceID {
			out = append(out, sp)
		}
	}
	return out
}

func (s *Sink) export(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxBody)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, "bad gzip", http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = io.LimitReader(zr, maxBody)
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	var got []Span
	n := 0
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				n++
				if !s.Keep {
					continue
				}
				got = append(got, Span{
					Service: service, Name: sp.GetName(),
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentID: hex.EncodeToString(sp.GetParentSpanId()),
					Start:    time.Unix(0, int64(sp.GetStartTimeUnixNano())), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())),
				})
			}
		}
	}
	s.mu.Lock()
	s.received += n
	s.spans = append(s.spans, got...)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}
