// Package deploy holds no code: it is the home of deploy_test.go, which keeps the deployment files in
// this directory honest — every environment variable set for a ConfigSync binary is one that binary
// reads, every service has its probes, resources and hardening, the kustomizations list their files and
// render, and the NATS server config parses with the auth include natsauthgen writes.
package deploy
