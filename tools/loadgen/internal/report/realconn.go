package report

import (
	"fmt"

	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

// connectStorm renders the real-connection fleet's connect storm ("" when the fleet was multiplexed).
func connectStorm(r *scenario.Result) string {
	s := r.ConnectStorm
	if s == nil {
		return ""
	}
	out := fmt.Sprintf("Connect storm (every agent its own TLS connection and NATS user, before the herd): %d of %d connected in %s (%s/s; %d at a time over %d source addresses); one connect %s.",
		s.Conns-s.Failed, s.Conns, dur(s.Elapsed), num(s.PerSecond), s.Concurrency, s.SourceAddrs, summary(s.Latency))
	if len(s.Errors) > 0 {
		out += " Errors: " + kv(s.Errors) + "."
	}
	who := "nats-server"
	if _, apart := s.CPU[scenario.CPUNATSServer]; !apart {
		who = "nats-server (the services' processes that embed it, which alone work during the storm)"
	}
	out += fmt.Sprintf("\n  %s: RSS %s → %s, %s per 10,000 connections; CPU %s during the storm (%s per 10,000 connections); idle, %s of CPU per second per 10,000 connections (over %s). Command subscriptions took %s.",
		who, mib(s.RSSBefore), mib(s.RSSAfter), mib(s.RSSPer10k), dur(s.CPU.NATSServer()), dur(s.CPUPer10k), dur(s.IdleCPUPer10k), dur(s.Settle), dur(s.Subscribed))
	out += "\n  CPU during the storm: " + cpuLine(s.CPU, int64(s.Conns-s.Failed), "connection")
	return out
}
