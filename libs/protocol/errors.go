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
)

// Error is the error object of every reply: {"code": "...", "message": "..."}.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf builds an *Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}
