package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
	"github.com/configsync/configsync/services/config-api/internal/configs"
	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/httpedge"
)

// errorBody is every error response: {"error":{"code","message"}}.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

var (
	errRouteNotFound    = &fault.Error{Kind: fault.NotFound, Message: "no such route"}
	errMethodNotAllowed = &fault.Error{Kind: fault.Invalid, Code: "method_not_allowed", Message: "method not allowed on this route"}
	errBodyTooLarge     = &fault.Error{Kind: fault.Invalid, Code: "payload_too_large", Message: fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes)}
)

// A database outage is answered 503 with this message and Retry-After (seconds): PostgreSQL restarting
// or failing over is usually back within seconds, so clients and load balancers should try again rather
// than treat it as a bug.
const (
	msgDatabaseUnavailable = "the database is unavailable; retry later"
	retryAfterDatabase     = "1"
)

// statusOf maps a failure to its HTTP status and default error code. This and writeError are the only
// places use-case errors meet HTTP.
func statusOf(err error) (int, string) {
	status, code := httpedge.StatusOf(err)
	var fe *fault.Error
	switch {
	case fault.StoreUnavailable(err) || !errors.As(err, &fe):
	case fe == errBodyTooLarge:
		return http.StatusRequestEntityTooLarge, fe.Code
	case fe == errMethodNotAllowed:
		return http.StatusMethodNotAllowed, fe.Code
	case fe.Code != "" && status != http.StatusInternalServerError:
		// A use case's more specific code (e.g. "unknown_config_type") replaces the status's default.
		code = fe.Code
	}
	return status, code
}

// writeError writes err as an error response. Internal and dependency failures are logged with their
// cause and answered with a generic message; nothing from SQL or a stack ever reaches the caller.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := statusOf(err)
	dbDown := fault.StoreUnavailable(err)
	msg := "internal error"
	var fe *fault.Error
	switch {
	case dbDown:
		msg = msgDatabaseUnavailable
	case errors.As(err, &fe) && status != http.StatusInternalServerError:
		msg = fe.Message
	}
	switch {
	case dbDown:
		// An outage, not a bug: Warn, and the cause (never the SQL) for the operator.
		a.log.Warn("request failed: database unavailable", zap.String("method", r.Method), zap.String("route", routeTemplate(r)), zap.Error(err))
		w.Header().Set("Retry-After", retryAfterDatabase)
	case status >= 500:
		a.log.Error("request failed", zap.String("method", r.Method), zap.String("route", routeTemplate(r)), zap.Error(err))
	case status == http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="configsync"`)
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Code: code, Message: msg}})
}

// dataBody is every success response: {"data": ...}.
type dataBody struct {
	Data any `json:"data"`
}

// versioned is the view of one config: a response of it carries its version as the ETag (If-Match
// compares with it).
type versioned interface {
	etag() string
}

func writeData(w http.ResponseWriter, status int, data any) error {
	if v, ok := data.(versioned); ok {
		w.Header().Set("ETag", v.etag())
	}
	writeJSON(w, status, dataBody{Data: data})
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a JSON request body into dst: at most MaxBodyBytes, one JSON value, no unknown fields.
func decode(w http.ResponseWriter, r *http.Request, dst any) error {
	data, err := readBody(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return fault.Invalidf("a JSON request body is required")
	}
	return decodeBytes(data, dst)
}

// decodeOptional is decode for a body that may be absent.
func decodeOptional(w http.ResponseWriter, r *http.Request, dst any) error {
	data, err := readBody(w, r)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return err
	}
	return decodeBytes(data, dst)
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, errBodyTooLarge
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errBodyTooLarge
		}
		return nil, fault.Invalidf("could not read the request body")
	}
	return data, nil
}

func decodeBytes(data []byte, dst any) error {
	// json.Decode accepts null for a struct and leaves it zero, which would read as "no body" (e.g. a
	// rotate without a new secret). Every request envelope is a JSON object.
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return fault.Invalidf("malformed JSON body: the request body must be a JSON object, not null")
	}
	switch err := protocol.DecodeOne(data, dst); {
	case errors.Is(err, protocol.ErrDataAfterValue):
		return fault.Invalidf("malformed JSON body: unexpected data after the JSON value")
	case err != nil:
		return fault.Invalidf("malformed JSON body: %s", describeJSONError(err))
	}
	return nil
}

// describeJSONError explains a decoding error without echoing request content beyond a field name.
func describeJSONError(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("syntax error at offset %d", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("field %q must be %s", typ.Field, typ.Type.String())
		}
		return "wrong JSON type for the request envelope"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected end of input"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		return "invalid JSON"
	}
}

// pathID parses the UUID path variable name.
func pathID(r *http.Request, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(mux.Vars(r)[name])
	if err != nil {
		return uuid.Nil, fault.Invalidf("%s must be a UUID", name)
	}
	return id, nil
}

// queryBool parses an optional boolean query parameter.
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fault.Invalidf("query parameter %s must be true or false", name)
	}
	return b, nil
}

// queryInt parses an optional non-negative integer query parameter.
func queryInt(r *http.Request, name string) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fault.Invalidf("query parameter %s must be a non-negative integer", name)
	}
	return n, nil
}

// etag is the ETag of a config version: the quoted version.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// ifMatch parses an If-Match header: "*" or a list of quoted versions. Weak tags never match (RFC 9110
// strong comparison), so they are rejected as malformed.
func ifMatch(r *http.Request) (configs.Precondition, error) {
	values := r.Header.Values("If-Match")
	var cond configs.Precondition
	for _, v := range values {
		for _, tag := range strings.Split(v, ",") {
			tag = strings.TrimSpace(tag)
			if tag == "" {
				continue
			}
			if tag == "*" {
				cond.Any = true
				continue
			}
			unq, ok := strings.CutPrefix(tag, `"`)
			if ok {
				unq, ok = strings.CutSuffix(unq, `"`)
			}
			n, err := strconv.ParseInt(unq, 10, 64)
			if !ok || err != nil {
				return configs.Precondition{}, fault.PreconditionFailedf("If-Match must be * or quoted config versions such as \"42\"")
			}
			cond.Versions = append(cond.Versions, n)
		}
	}
	return cond, nil
}
