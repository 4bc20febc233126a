package policy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		return pfx.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap().WithZone("")
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func validHostName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
				return false
			}
		}
	}
	return true
}

func (p *Policy) restricted() bool { return len(p.allowNet) > 0 || len(p.allowHst) > 0 }

func (p *Policy) hostListed(host string) bool {
	return p.allowHst[strings.ToLower(strings.TrimSuffix(host, "."))]
}

// checkIP decides one resolved address. hostListed says the connection was asked for by a host name
// that policy.network.allow lists.
func (p *Policy) checkIP(ip netip.Addr, port int, hostListed bool) error {
	ip = ip.Unmap().WithZone("")
	for _, d := range p.denyNet {
		if d.Contains(ip) {
			return refuse(RuleNetwork, "%s is denied (%s)", ip, d)
		}
	}
	if err := p.checkPort(port); err != nil {
		return err
	}
	if !p.restricted() || hostListed {
		return nil
	}
	for _, a := range p.allowNet {
		if a.Contains(ip) {
			return nil
		}
	}
	return refuse(RuleNetwork, "%s is not in policy.network.allow", ip)
}

func (p *Policy) checkPort(port int) error {
	if len(p.ports) > 0 && !p.ports[port] {
		return refuse(RuleNetwork, "port %d is not in policy.network.ports", port)
	}
	return nil
}

// CheckHost checks a collector's target before any connection: a literal address is decided in full,
// a host name by the port and, when policy.network.allow is set, by the names and CIDRs it lists (a
// name not listed may still resolve into an allowed CIDR, which DialContext decides).
func (p *Policy) CheckHost(host string, port int) error {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.checkIP(ip, port, false)
	}
	return p.checkPort(port)
}

// CheckAddress is CheckHost for "host:port".
func (p *Policy) CheckAddress(addr string) error {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return refuse(RuleNetwork, "%q is not host:port", addr)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return refuse(RuleNetwork, "%q: bad port", addr)
	}
	return p.CheckHost(host, port)
}

// CheckURL is CheckHost for an http(s) URL (default ports 80 and 443).
func (p *Policy) CheckURL(u *url.URL) error {
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil {
			return refuse(RuleNetwork, "%s: bad port", u.Host)
		}
		port = n
	}
	return p.CheckHost(u.Hostname(), port)
}

// DialContext connects like net.Dialer.DialContext, checking every address it is about to connect to
// in a Control hook — after DNS resolution, before the connect system call — so a name that resolves
// to a denied address is refused without a packet sent.
func (p *Policy) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	listed := p.hostListed(host)
	d := net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return refuse(RuleNetwork, "cannot check address %q", address)
		}
		return p.checkIP(ap.Addr(), int(ap.Port()), listed)
	}}
	return d.DialContext(ctx, network, addr)
}

// CheckRedirect refuses a redirect the policy would not allow as a first request (DialContext checks
// the address it resolves to), and more than 10 redirects.
func (p *Policy) CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return refuse(RuleNetwork, "redirect to scheme %q", req.URL.Scheme)
	}
	return p.CheckURL(req.URL)
}

// HTTPClient is the policy's http.Client (one per policy, shared like http.DefaultClient): its
// connections go through DialContext and its redirects through CheckRedirect. It uses no proxy: a
// proxy from the environment would be dialled instead of the target, whose address could then not be
// checked.
func (p *Policy) HTTPClient() *http.Client {
	p.httpOnce.Do(func() { p.http = p.newHTTPClient() })
	return p.http
}

// CloseIdleConnections closes the HTTP client's idle connections (the agent stops).
func (p *Policy) CloseIdleConnections() { p.HTTPClient().CloseIdleConnections() }

func (p *Policy) newHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           p.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: p.CheckRedirect,
	}
}
