package metrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/configsync/configsync/agent/internal/policy"
	"github.com/configsync/configsync/libs/agentconfig"
)

func joinHostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

func up(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// checkSamples is the common shape of a check's result: <type>.up and <type>.duration_ms.
func checkSamples(typ, name string, ok bool, took time.Duration, extra map[string]string) []Sample {
	l := map[string]string{"collector": name}
	for k, v := range extra {
		l[k] = v
	}
	return []Sample{
		{Name: typ + ".up", Value: up(ok), Labels: l},
		{Name: typ + ".duration_ms", Value: ms(took), Labels: l},
	}
}

// dialFunc connects; collectors get the policy's (policy.Policy.DialContext), which checks the address
// a name resolves to before connecting.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// dial connects with the context's deadline and sets it on the connection too.
func dial(ctx context.Context, d dialFunc, addr string) (net.Conn, error) {
	c, err := d(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	return c, nil
}

// httpCheck requests a URL and compares the status.
type httpCheck struct {
	name, url, method  string
	expect             int
	username, password string
	client             *http.Client
}

func newHTTPCheck(s agentconfig.Collector, pol *policy.Policy) (Collector, error) {
	c := &httpCheck{name: s.Name, url: s.URL, method: s.Method, expect: s.ExpectStatus,
		username: s.Username, password: s.Password, client: pol.HTTPClient()}
	if !strings.HasPrefix(c.url, "http://") && !strings.HasPrefix(c.url, "https://") {
		return nil, fmt.Errorf("url must be http:// or https://")
	}
	if c.method == "" {
		c.method = http.MethodGet
	}
	return c, nil
}

func (c *httpCheck) Name() string { return "http/" + c.name }

func (c *httpCheck) Collect(ctx context.Context) ([]Sample, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, c.method, c.url, nil)
	if err != nil {
		return checkSamples("http", c.name, false, 0, nil), err
	}
	if c.username != "" || c.password != "" {
		req.SetBasicAuth(c.username, c.password)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return checkSamples("http", c.name, false, time.Since(start), nil), err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	took := time.Since(start)
	ok := resp.StatusCode < 400
	if c.expect != 0 {
		ok = resp.StatusCode == c.expect
	}
	s := checkSamples("http", c.name, ok, took, nil)
	s = append(s, Sample{Name: "http.status", Value: float64(resp.StatusCode), Labels: map[string]string{"collector": c.name}})
	if !ok {
		return s, fmt.Errorf("status %d", resp.StatusCode)
	}
	return s, nil
}

// tcpCheck connects to an address.
type tcpCheck struct {
	name, addr string
	dial       dialFunc
}

func newTCPCheck(s agentconfig.Collector, pol *policy.Policy) (Collector, error) {
	addr := s.Address
	if addr == "" {
		return nil, fmt.Errorf("address is required")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("address %q: %w", addr, err)
	}
	return &tcpCheck{name: s.Name, addr: addr, dial: pol.DialContext}, nil
}

func (c *tcpCheck) Name() string { return "tcp/" + c.name }

func (c *tcpCheck) Collect(ctx context.Context) ([]Sample, error) {
	start := time.Now()
	conn, err := dial(ctx, c.dial, c.addr)
	if err != nil {
		return checkSamples("tcp", c.name, false, time.Since(start), nil), err
	}
	_ = conn.Close()
	return checkSamples("tcp", c.name, true, time.Since(start), nil), nil
}

// redisCheck authenticates (when a password is set) and PINGs.
type redisCheck struct {
	name, addr, username, password string
	dial                           dialFunc
}

func newRedisCheck(s agentconfig.Collector, pol *policy.Policy) (Collector, error) {
	addr, err := hostPort(s, 6379)
	if err != nil {
		return nil, err
	}
	return &redisCheck{name: s.Name, addr: addr, username: s.Username, password: s.Password, dial: pol.DialContext}, nil
}

func (c *redisCheck) Name() string { return "redis/" + c.name }

func (c *redisCheck) Collect(ctx context.Context) ([]Sample, error) {
	start := time.Now()
	err := c.ping(ctx)
	return checkSamples("redis", c.name, err == nil, time.Since(start), nil), err
}

func (c *redisCheck) ping(ctx context.Context) error {
	conn, err := dial(ctx, c.dial, c.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	cmd := func(args ...string) (string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := io.WriteString(conn, b.String()); err != nil {
			return "", err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "-") {
			return "", errors.New("redis: " + line[1:])
		}
		return line, nil
	}
	if c.password != "" {
		args := []string{"AUTH", c.password}
		if c.username != "" {
			args = []string{"AUTH", c.username, c.password}
		}
		if _, err := cmd(args...); err != nil {
			return err
		}
	}
	reply, err := cmd("PING")
	if err != nil {
		return err
	}
	if reply != "+PONG" {
		return fmt.Errorf("redis: unexpected PING reply %q", reply)
	}
	return nil
}

// mysqlCheck reads the server's handshake greeting: it proves a MySQL server answers and reports its
// version. (Authenticating would need the server's auth plugins; the greeting is enough for liveness.)
type mysqlCheck struct {
	name, addr string
	dial       dialFunc
}

func newMySQLCheck(s agentconfig.Collector, pol *policy.Policy) (Collector, error) {
	addr, err := hostPort(s, 3306)
	if err != nil {
		return nil, err
	}
	return &mysqlCheck{name: s.Name, addr: addr, dial: pol.DialContext}, nil
}

func (c *mysqlCheck) Name() string { return "mysql/" + c.name }

func (c *mysqlCheck) Collect(ctx context.Context) ([]Sample, error) {
	start := time.Now()
	version, err := c.greet(ctx)
	var extra map[string]string
	if version != "" {
		extra = map[string]string{"server_version": version}
	}
	return checkSamples("mysql", c.name, err == nil, time.Since(start), extra), err
}

func (c *mysqlCheck) greet(ctx context.Context) (string, error) {
	conn, err := dial(ctx, c.dial, c.addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var hdr [4]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return "", fmt.Errorf("mysql: read greeting: %w", err)
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	if n == 0 || n > 1<<16 {
		return "", fmt.Errorf("mysql: bad greeting length %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(conn, body); err != nil {
		return "", fmt.Errorf("mysql: read greeting: %w", err)
	}
	switch body[0] {
	case 0xff:
		msg := ""
		if len(body) > 3 {
			msg = string(body[3:])
		}
		return "", fmt.Errorf("mysql: server refused: %s", msg)
	case 10:
		end := strings.IndexByte(string(body[1:]), 0)
		if end < 0 {
			return "", errors.New("mysql: malformed greeting")
		}
		return string(body[1 : 1+end]), nil
	}
	return "", fmt.Errorf("mysql: unsupported protocol version %d", body[0])
}
