package httpapi

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/configs"
)

// Most routes have one shape: read the use case's input from the request (path ids, query parameters,
// a JSON body), call the use case, and answer its result's view in the {"data": ...} envelope. answer is
// that shape; the readers below are the inputs routes share.

// reader takes a use case's input from a request. It may answer a failure (a malformed id or body, or
// an object the caller cannot see) before the use case runs.
type reader[In any] func(w http.ResponseWriter, r *http.Request, p principal) (In, error)

// answer is a handler that reads the input, calls the use case with it and answers status with view of
// the result.
func answer[In, T, V any](read reader[In], call func(context.Context, principal, In) (T, error), status int, view func(T) V) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p principal) error {
		in, err := read(w, r, p)
		if err != nil {
			return err
		}
		out, err := call(r.Context(), p, in)
		if err != nil {
			return err
		}
		return writeData(w, status, view(out))
	}
}

// pathUUID reads the UUID path variable name.
func pathUUID(name string) reader[uuid.UUID] {
	return func(_ http.ResponseWriter, r *http.Request, _ principal) (uuid.UUID, error) {
		return pathID(r, name)
	}
}

// body reads the JSON request body (required).
func body[Req any](w http.ResponseWriter, r *http.Request, _ principal) (Req, error) {
	var req Req
	err := decode(w, r, &req)
	return req, err
}

// idBody is what names the object a route addresses (a path id, a config ref) and the request body.
type idBody[ID, Req any] struct {
	ID  ID
	Req Req
}

// withBody reads the object's name with id, then the JSON body: a bad id or an invisible object fails
// before the body is read.
func withBody[Req, ID any](id reader[ID]) reader[idBody[ID, Req]] {
	return func(w http.ResponseWriter, r *http.Request, p principal) (idBody[ID, Req], error) {
		var in idBody[ID, Req]
		var err error
		if in.ID, err = id(w, r, p); err != nil {
			return in, err
		}
		in.Req, err = body[Req](w, r, p)
		return in, err
	}
}

// matched is an input and the request's If-Match precondition.
type matched[In any] struct {
	In   In
	Cond configs.Precondition
}

// ifMatched reads the input with read, then the If-Match header.
func ifMatched[In any](read reader[In]) reader[matched[In]] {
	return func(w http.ResponseWriter, r *http.Request, p principal) (matched[In], error) {
		var m matched[In]
		var err error
		if m.In, err = read(w, r, p); err != nil {
			return m, err
		}
		m.Cond, err = ifMatch(r)
		return m, err
	}
}

// visibleEnvironment reads the envID path variable and checks that the caller can see the
// environment, so another client's environment is a 404 (audited) whatever the body holds, as on every
// other route that names an object.
func (a *API) visibleEnvironment(w http.ResponseWriter, r *http.Request, p principal) (uuid.UUID, error) {
	id, err := pathID(r, "envID")
	if err != nil {
		return uuid.Nil, err
	}
	_, err = a.svc.Tenants.Environment(r.Context(), p, id)
	return id, err
}

// each is view applied to every element of a list; the result is never nil, so an empty list is [].
func each[T, V any](view func(T) V) func([]T) []V {
	return func(xs []T) []V {
		out := make([]V, len(xs))
		for i, x := range xs {
			out[i] = view(x)
		}
		return out
	}
}

// asIs is the view of a result that is its own JSON shape.
func asIs[T any](v T) T { return v }
