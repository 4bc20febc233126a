// Command agent is the ConfigSync on-host agent. It reads its local YAML config, syncs its configs
// from the backend over NATS (falling back to its disk cache and local defaults), applies them live
// and reports heartbeats, until SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/configsync/configsync/agent/agentrun"
)

func main() {
	path := flag.String("config", "/etc/configsync/agent.yaml", "path of the agent's YAML config")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println(agentrun.Version)
		return
	}
	cfg, err := agentrun.LoadConfig(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := agentrun.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
