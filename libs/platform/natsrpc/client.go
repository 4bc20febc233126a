package natsrpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/configsync/configsync/libs/protocol"
)

// DefaultTimeout bounds one request when the client was given no timeout.
const DefaultTimeout = 10 * time.Second

// ErrBadReply is returned by Call for a reply that is neither an error nor decodable into the reply
// value. Its message tells the kind of the problem, never the payload (replies can hold secrets).
var ErrBadReply = errors.New("natsrpc: undecodable reply")

// Client sends JSON requests to micro services and decodes their replies.
type Client struct {
	nc      *nats.Conn
	timeout time.Duration
}

// NewClient returns a client on nc whose requests time out after timeout (0: DefaultTimeout), or
// earlier when the caller's context ends.
func NewClient(nc *nats.Conn, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{nc: nc, timeout: timeout}
}

// Call sends req as JSON (a json.RawMessage or []byte as it is) on subject and decodes the reply into
// reply (nil: the reply body is not read). It returns
//   - a *protocol.Error (errors.As) for an error reply;
//   - nats.ErrNoResponders, context.DeadlineExceeded, nats.ErrTimeout... (errors.Is) when the request
//     got no reply;
//   - ErrBadReply for a reply that does not decode.
func (c *Client) Call(ctx context.Context, subject string, req, reply any) error {
	data, err := protocol.EncodeJSON(req)
	if err != nil {
		return fmt.Errorf("natsrpc: encode %s request: %w", subject, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		return fmt.Errorf("natsrpc: request %s: %w", subject, err)
	}
	if perr := ReplyError(msg); perr != nil {
		return fmt.Errorf("%s: %w", subject, perr)
	}
	if reply == nil {
		return nil
	}
	if err := decodeReply(msg.Data, reply); err != nil {
		return fmt.Errorf("%s: %w: %s", subject, ErrBadReply, JSONErrorKind(err))
	}
	return nil
}

// JSONDecoder is a reply type that decodes its JSON body itself, validating all of it, exactly as
// json.Unmarshal would (protocol.ResolveSetsReply: a herd's replies are large). Call hands it the body
// directly, sparing encoding/json's own validation passes over it.
type JSONDecoder interface {
	DecodeJSON(data []byte) error
}

func decodeReply(data []byte, reply any) error {
	if d, ok := reply.(JSONDecoder); ok {
		return d.DecodeJSON(data)
	}
	return json.Unmarshal(data, reply)
}

// CallFor is Call decoding the reply into a new R: one line per endpoint in a service's client.
func CallFor[R any](ctx context.Context, c *Client, subject string, req any) (R, error) {
	var reply R
	err := c.Call(ctx, subject, req, &reply)
	return reply, err
}

var errorPrefix = []byte(`{"error"`)

// ReplyError returns the error of an error reply, or nil for any other reply. The body
// {"error":{"code","message"}} wins; a reply with only the micro error headers is read from those. A
// successful reply is not decoded here (only its first bytes are looked at).
func ReplyError(msg *nats.Msg) *protocol.Error {
	code := msg.Header.Get(micro.ErrorCodeHeader)
	if bytes.HasPrefix(bytes.TrimLeft(msg.Data, " \t\r\n"), errorPrefix) {
		var body errorReply
		if json.Unmarshal(msg.Data, &body) == nil && body.Error != nil && body.Error.Code != "" {
			return body.Error
		}
	}
	if code == "" {
		return nil
	}
	return &protocol.Error{Code: code, Message: msg.Header.Get(micro.ErrorHeader)}
}

// JSONErrorKind describes a JSON decode error without echoing the payload.
func JSONErrorKind(err error) string {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	var setsErr *protocol.SetsDecodeError
	switch {
	case errors.As(err, &setsErr):
		return setsErr.Error() // an offset and a field name, never the payload
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at offset %d", syntax.Offset)
	case errors.As(err, &typeErr):
		return "a field has the wrong type"
	default:
		return "invalid JSON"
	}
}
