package convert

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/txsink/txsink/config"
)

// Defaults of the worker's Schema Registry client settings.
const (
	// DefaultRegistryMaxResponseBytes is schema.registry.max.response.bytes'
	// default: 4 MiB, twice the largest record a default Kafka topic
	// (where a registry keeps its schemas) holds, with room for JSON
	// escaping.
	DefaultRegistryMaxResponseBytes = 4 << 20
	// DefaultRegistryTimeout is schema.registry.request.timeout.ms'
	// default.
	DefaultRegistryTimeout = 10 * time.Second
)

// maxRegistryRedirects bounds the redirects one request follows (all of
// them to the same scheme, host and port).
const maxRegistryRedirects = 5

// RegistryPolicy is what the worker lets the converters' Schema Registry
// clients do: where they may connect and how much they read. It comes
// from worker settings (schema.registry.*), never from a connector
// configuration, which a REST client writes. The zero value is the
// default policy: any host but link-local addresses and cloud metadata
// services, 4 MiB answers, 10 s requests. See docs/security.md.
type RegistryPolicy struct {
	// AllowedHosts are the hosts registry URLs may name
	// (schema.registry.allowed.hosts): "host", "host:port", "*.domain",
	// an IP address (that also lifts the refusal of a link-local or
	// metadata address for itself), or "*". Empty: any host.
	AllowedHosts []string
	// MaxResponseBytes bounds the body of one answer; 0:
	// DefaultRegistryMaxResponseBytes.
	MaxResponseBytes int64
	// Timeout bounds one request, the whole answer read included; 0:
	// DefaultRegistryTimeout.
	Timeout time.Duration

	// lookup, when set, resolves host names instead of the system's
	// resolver (tests: a name that resolves to a link-local address).
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// beforeConnect, when set, runs after the address checks, just
	// before a connection is made (tests: record every address dialled,
	// refuse any outside the machine).
	beforeConnect func(addr netip.AddrPort) error
}

func (p RegistryPolicy) maxBytes() int64 {
	if p.MaxResponseBytes > 0 {
		return p.MaxResponseBytes
	}
	return DefaultRegistryMaxResponseBytes
}

func (p RegistryPolicy) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return DefaultRegistryTimeout
}

// ErrRegistryRefused is wrapped by the errors of registry requests the
// worker refuses to make or to finish: an address outside
// schema.registry.allowed.hosts, a link-local or metadata address, a
// redirect to another origin, an answer larger than
// schema.registry.max.response.bytes. They are failures of the
// environment or of the configuration, never a bad record.
var ErrRegistryRefused = errors.New("schema registry request refused")

// registryRefusal is a refused registry request: Msg says why and which
// setting decides.
type registryRefusal struct{ Msg string }

func (e *registryRefusal) Error() string { return e.Msg }
func (e *registryRefusal) Unwrap() error { return ErrRegistryRefused }

// metadataNames are host names of cloud metadata services, refused unless
// schema.registry.allowed.hosts lists them.
var metadataNames = map[string]bool{
	"metadata":                     true,
	"metadata.google.internal":     true,
	"metadata.goog":                true,
	"instance-data":                true,
	"instance-data.ec2.internal":   true,
	"metadata.azure.com":           true,
	"metadata.tencentyun.com":      true,
	"metadata.platformequinix.com": true,
}

// metadataAddrs are addresses of cloud metadata services outside the
// link-local ranges (which are refused whole).
var metadataAddrs = map[netip.Addr]string{
	netip.MustParseAddr("fd00:ec2::254"):   "AWS's metadata service",
	netip.MustParseAddr("100.100.100.200"): "Alibaba Cloud's metadata service",
	netip.MustParseAddr("192.0.0.192"):     "Oracle Cloud's metadata service",
}

var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
)

// blockedAddr says why ip may not be a registry's address ("" when it
// may): link-local (169.254.0.0/16, fe80::/10, where cloud metadata
// services answer), a metadata service, unspecified or multicast. IPv4
// addresses inside IPv6 ones (mapped, compatible, NAT64, 6to4) are
// checked as IPv4.
func blockedAddr(ip netip.Addr) string {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		b := ip.As16()
		var v4 [4]byte
		embedded := true
		switch {
		case nat64Prefix.Contains(ip):
			copy(v4[:], b[12:])
		case sixToFour.Contains(ip):
			copy(v4[:], b[2:6])
		case b == [16]byte{} || ip == netip.IPv6Loopback():
			embedded = false
		case [12]byte(b[:12]) == [12]byte{}:
			copy(v4[:], b[12:]) // IPv4-compatible ::a.b.c.d
		default:
			embedded = false
		}
		if embedded {
			if why := blockedAddr(netip.AddrFrom4(v4)); why != "" {
				return why + " (inside the IPv6 address " + ip.String() + ")"
			}
		}
	}
	if who, ok := metadataAddrs[ip]; ok {
		return ip.String() + " is " + who
	}
	switch {
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return ip.String() + " is link-local (where cloud metadata services answer)"
	case ip.IsUnspecified(), ip.Is4() && thisNetwork.Contains(ip):
		return ip.String() + " is not the address of a host"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast(), ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return ip.String() + " is a multicast or broadcast address"
	}
	return ""
}

// normHost returns host (without brackets) lowercased, without a
// trailing dot, an IP address in its canonical form.
func normHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String()
	}
	return host
}

// numericName reports whether host is not an IP address in canonical
// form but would be read as one by some resolvers (inet_aton's
// 2852039166, 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518): its last
// label is a number, which no DNS name's is.
func numericName(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if strings.HasPrefix(last, "0x") {
		return true
	}
	_, err := strconv.ParseUint(last, 10, 64)
	return err == nil
}

// defaultPort returns u's port, or its scheme's.
func defaultPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// origin is u's scheme, host and port in canonical form.
func origin(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + net.JoinHostPort(normHost(u.Hostname()), defaultPort(u))
}

// listed reports whether host (normalised) and port match an entry of
// AllowedHosts; exact requires a host entry, not "*" nor "*.domain".
func (p RegistryPolicy) listed(host, port string, exact bool) bool {
	for _, e := range p.AllowedHosts {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if e == "*" {
			if !exact {
				return true
			}
			continue
		}
		eh, ep := e, ""
		if h, pt, err := net.SplitHostPort(e); err == nil {
			eh, ep = h, pt
		}
		eh = normHost(eh)
		if ep != "" && ep != port {
			continue
		}
		if d, ok := strings.CutPrefix(eh, "*."); ok {
			if !exact && strings.HasSuffix(host, "."+d) {
				return true
			}
			continue
		}
		if eh == host {
			return true
		}
	}
	return false
}

// checkURL checks a registry URL's host before any request: the
// allowlist, metadata names, IP addresses that are link-local or a
// metadata service, and names some resolvers would read as an address.
// The error names the setting that decides; it never quotes user
// information.
func (p RegistryPolicy) checkURL(u *url.URL) error {
	host, port := normHost(u.Hostname()), defaultPort(u)
	where := u.Scheme + "://" + net.JoinHostPort(host, port)
	if host == "" {
		return &registryRefusal{Msg: where + ": no host"}
	}
	ip, err := netip.ParseAddr(host)
	isIP := err == nil
	switch {
	case !isIP && numericName(host):
		return &registryRefusal{Msg: fmt.Sprintf("%s: the host %q is neither a DNS name nor an IP address in canonical form (write a.b.c.d)", where, host)}
	case len(p.AllowedHosts) > 0 && !p.listed(host, port, false):
		return &registryRefusal{Msg: fmt.Sprintf("%s: the host is not in the worker's %s (%s)", where, config.KeyRegistryAllowedHosts, strings.Join(p.AllowedHosts, ","))}
	case !isIP && metadataNames[host] && !p.listed(host, port, true):
		return &registryRefusal{Msg: fmt.Sprintf("%s: %s is a cloud metadata service, refused unless the worker's %s lists it", where, host, config.KeyRegistryAllowedHosts)}
	case isIP:
		if why := blockedAddr(ip); why != "" && !p.listed(host, port, true) {
			return &registryRefusal{Msg: fmt.Sprintf("%s: %s; refused unless the worker's %s lists this address", where, why, config.KeyRegistryAllowedHosts)}
		}
	}
	return nil
}

// checkDial checks an address about to be connected to, after name
// resolution: a name that resolves (or rebinds) to a link-local or
// metadata address is refused here, before any packet is sent to it.
func (p RegistryPolicy) checkDial(address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &registryRefusal{Msg: fmt.Sprintf("dial %q: not an IP address and port", address)}
	}
	ip := ap.Addr().Unmap().WithZone("")
	if why := blockedAddr(ip); why != "" && !p.listed(ip.String(), strconv.Itoa(int(ap.Port())), true) {
		return &registryRefusal{Msg: fmt.Sprintf("connecting to %s: %s; refused unless the worker's %s lists this address", ap, why, config.KeyRegistryAllowedHosts)}
	}
	if p.beforeConnect != nil {
		return p.beforeConnect(ap)
	}
	return nil
}

// httpClient returns the HTTP client of one converter's registry: TLS as
// configured, every connection's address checked before it is made, no
// redirect to another scheme, host or port (the credentials are bound to
// the URL's), answers read up to the limit, and a total timeout per
// request.
func (p RegistryPolicy) httpClient(tlsCfg *tls.Config) *http.Client {
	d := &net.Dialer{
		Timeout:   p.timeout(),
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			return p.checkDial(address)
		},
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.MaxResponseHeaderBytes = 64 << 10
	tr.DialContext = d.DialContext
	if p.lookup != nil {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			var ips []netip.Addr
			if ip, err := netip.ParseAddr(host); err == nil {
				ips = []netip.Addr{ip}
			} else if ips, err = p.lookup(ctx, host); err != nil {
				return nil, err
			}
			var first error
			for _, ip := range ips {
				c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
				if err == nil {
					return c, nil
				}
				if first == nil {
					first = err
				}
			}
			if first == nil {
				first = fmt.Errorf("no address for %s", host)
			}
			return nil, first
		}
	}
	return &http.Client{
		Timeout:   p.timeout(),
		Transport: &limitTransport{base: tr, p: p},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			from, to := origin(via[0].URL), origin(req.URL)
			code := 0
			if req.Response != nil {
				code = req.Response.StatusCode
			}
			if from != to {
				return &registryRefusal{Msg: fmt.Sprintf("%s redirected (HTTP %d) to %s: a redirect to another scheme, host or port is refused, so that the registry's credentials go only where %s says", from, code, to, SettingRegistryURL)}
			}
			if len(via) >= maxRegistryRedirects {
				return &registryRefusal{Msg: fmt.Sprintf("%s: more than %d redirects", from, maxRegistryRedirects)}
			}
			return nil
		},
	}
}

// limitTransport checks every request's URL against the policy and
// bounds the body of every answer.
type limitTransport struct {
	base http.RoundTripper
	p    RegistryPolicy
}

func (t *limitTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.p.checkURL(req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	res, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	max := t.p.maxBytes()
	if res.ContentLength > max {
		res.Body.Close()
		return nil, tooLarge(max, res.ContentLength)
	}
	res.Body = &limitedBody{rc: res.Body, max: max}
	return res, nil
}

func tooLarge(max, size int64) error {
	got := "more than " + strconv.FormatInt(max, 10) + " bytes"
	if size > 0 {
		got = strconv.FormatInt(size, 10) + " bytes (Content-Length)"
	}
	return &registryRefusal{Msg: fmt.Sprintf("the answer has %s, more than the worker's %s=%d allows; it was not read further (raise the setting if the registry's schemas are that large)", got, config.KeyRegistryMaxResponse, max)}
}

// limitedBody reads at most max bytes of an answer; one more is an error.
type limitedBody struct {
	rc   io.ReadCloser
	max  int64
	n    int64
	over bool
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, tooLarge(b.max, 0)
	}
	if left := b.max - b.n + 1; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if b.n > b.max {
		b.over = true
		return n - int(b.n-b.max), tooLarge(b.max, 0)
	}
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
