// Package e2e holds ConfigSync's end-to-end tests: the five services run as separate processes (built
// from their cmd/ packages), with agents (agent/cmd/agent) against a real PostgreSQL and an embedded
// nats-server in operator mode with JetStream, driven only through the operator REST API, NATS and the
// files an agent keeps on disk. See README.md for what the tests prove.
package e2e
