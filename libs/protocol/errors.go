package protocol

import "fmt"

// Error codes carried in replies and micro errors. They are stable: clients switch on them.
const (
	CodeInvalidRequest   = "invalid_request"
	CodeNotFound         = "not_found"
	CodeForbidden        = "forbidden"
	CodeConflict         = "conflict"
	CodeUnavailable      = "unavailable"
	CodeCredentialFailed = "credential_failed"
	CodeInternal         = "internal"
	// CodeContractMismatch: the request is of another contract version than the service speaks (a
	// rolling upgrade in progress); the caller treats it as unavailable and retries.
	CodeContractMismatch = "contract_mismatch"
)

// Error is the error object of every reply: {"code": "...", "message": "..."}.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfterMS, on an "unavailable" refusal, is when the server wants the caller back (delivery
	// sets it when its fetch queue is full, spread by its own load): an agent waits at least this long
	// before retrying, then applies its own backoff.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
