// Package browser drives the web console in a real browser: Debian's headless Chromium, through
// chromedp, against a real stack in this process (PostgreSQL, embedded NATS, the five services composed
// as tools/devstack composes them, and the real agent).
package browser
