// Package agentconfig is the single source of truth for ConfigSync's ten agent config types: their
// typed Go shapes, JSON Schemas, validation, the two-level merge (environment defaults + host
// overrides), resolution, RFC 8785 canonical JSON, redaction of injected secrets, and the config hash
// that agents report and the backend checks for drift.
//
// The package is pure: no I/O, no logging, standard library only. The backend services and the agent
// both import it, so a config validated, merged, redacted or hashed on one side means the same on the
// other.
package agentconfig
