// Package fault defines the ways a config-api use case can fail. Use cases return these typed errors;
// the HTTP edge maps each Kind to a status code and an {"error":{"code","message"}} body in one place.
package fault

import (
	"errors"
	"fmt"
)

// ErrStoreUnavailable is wrapped by the store adapter around every error of a database outage
// (PostgreSQL unreachable or refusing work). Unless a use case classified the failure otherwise, the
// edge answers it as unavailable and invites a retry.
var ErrStoreUnavailable = errors.New("store unavailable")

// StoreUnavailable reports whether err is a database outage (ErrStoreUnavailable) that no use case
// classified otherwise: a fault of another kind keeps its own meaning. Every edge answers it as
// unavailable.
func StoreUnavailable(err error) bool {
	return KindOf(err) == Internal && errors.Is(err, ErrStoreUnavailable)
}

// Kind classifies a failure the caller can act on.
type Kind int

// Kinds of failure. Internal is the zero value: anything unclassified is an internal error whose
// details never reach the caller.
const (
	Internal Kind = iota
	Invalid
	Unauthenticated
	Forbidden
	NotFound
	Conflict
	PreconditionFailed
	Unavailable
)

// Error is a classified failure. Message is safe to show to the caller; Err (if any) is the cause,
// kept for logs only.
type Error struct {
	Kind    Kind
	Code    string // optional, more specific than the Kind's default code (e.g. "unknown_config_type")
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of err, Internal when err carries none.
func KindOf(err error) Kind {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Kind
	}
	return Internal
}

// Is reports whether err is a fault of kind k.
func Is(err error, k Kind) bool { return err != nil && KindOf(err) == k }

func newf(k Kind, format string, args ...any) *Error {
	return &Error{Kind: k, Message: fmt.Sprintf(format, args...)}
}

// Invalidf reports a request the caller must change.
func Invalidf(format string, args ...any) error { return newf(Invalid, format, args...) }

// InvalidCode reports an invalid request with a specific error code.
func InvalidCode(code, message string, cause error) error {
	return &Error{Kind: Invalid, Code: code, Message: message, Err: cause}
}

// NotFoundf reports an object that does not exist or that the caller may not see.
func NotFoundf(format string, args ...any) error { return newf(NotFound, format, args...) }

// Conflictf reports a request that clashes with the current state (duplicate name, revoked host).
func Conflictf(format string, args ...any) error { return newf(Conflict, format, args...) }

// Forbiddenf reports a caller that is known but not allowed to do this.
func Forbiddenf(format string, args ...any) error { return newf(Forbidden, format, args...) }

// Unauthenticatedf reports a missing or unknown credential.
func Unauthenticatedf(format string, args ...any) error {
	return newf(Unauthenticated, format, args...)
}

// PreconditionFailedf reports an If-Match that no longer holds (a lost update was prevented).
func PreconditionFailedf(format string, args ...any) error {
	return newf(PreconditionFailed, format, args...)
}

// ServiceUnavailable reports a dependency (resolver, credential service) that could not answer.
func ServiceUnavailable(message string, cause error) error {
	return &Error{Kind: Unavailable, Message: message, Err: cause}
}
