// Package faults holds ConfigSync's fault suite: integration tests that break one part of the running
// system at a time (NATS, config-api between commit and relay, delivery mid-fan-out, ack-ingest, the
// PostgreSQL connections, the credential cipher, the agent mid cache write) and check that the rest
// recovers without losing or repeating work, plus hostile-input checks on every NATS subject and every
// config-api route. It has no non-test code; see README.md for the scenarios.
package faults
