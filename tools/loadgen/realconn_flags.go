package main

import (
	"flag"
	"time"

	"github.com/configsync/configsync/tools/loadgen/internal/scenario"
)

// The real-connection mode's flags (scenario.RealConnections).
var realConns struct {
	on                       bool
	sourceAddrs, concurrency int
	settle                   time.Duration
}

func init() {
	flag.BoolVar(&realConns.on, "real-conns", false, "give every agent its own TLS connection as its own NATS user (the creds its registration issued) and its own command subscription; -conns and -subscriptions are ignored. One process holds at most its open-file limit of connections")
	flag.IntVar(&realConns.sourceAddrs, "source-addrs", 8, "real-conns: spread connections to a loopback server over this many source addresses 127.0.1.x (about 28,000 ephemeral ports per address pair)")
	flag.IntVar(&realConns.concurrency, "connect-concurrency", 32, "real-conns: connections being established at once during the connect storm")
	flag.DurationVar(&realConns.settle, "settle", 10*time.Second, "real-conns: idle window after the connect storm in which the server's cost of holding the connections is measured")
}

// realOptions is the real-connection mode of the run, nil when off.
func realOptions() *scenario.RealConnections {
	if !realConns.on {
		return nil
	}
	return &scenario.RealConnections{SourceAddrs: realConns.sourceAddrs, Concurrency: realConns.concurrency, Settle: realConns.settle}
}
