// Package testinfra gives ConfigSync tests real infrastructure: a fresh, migrated PostgreSQL database per
// test (cloned from a template built once per migration set), an in-process nats-server with JetStream,
// and a zap logger whose entries tests can inspect. Missing infrastructure fails the test with
// instructions; it never skips.
package testinfra
