// Package faultnet puts fault-injecting TCP proxies between txsink and the
// services it talks to (PostgreSQL, Kafka brokers, ClickHouse), for tests.
//
// A Proxy listens on 127.0.0.1 and forwards to one upstream through two
// stages:
//
//	client ── toxiproxy ── cutter ── upstream
//
// The first stage is Shopify's toxiproxy, used as a library: latency
// spikes, bandwidth limits and half-open connections (every byte swallowed,
// the connection kept open) come from its toxics. The second stage reads
// the wire protocol the proxy was made for and can lose the answer to one
// chosen request: the request reaches the server and is executed, its
// reply is dropped and the connection cut (a Cut). That is the fault that
// makes a commit's outcome unknown to the client: COMMIT PREPARED, a local
// COMMIT, Kafka's EndTxn or TxnOffsetCommit, a ClickHouse block insert.
//
// Proxies never connect anywhere but to their upstream; they stop with
// Close. The zero toxic state passes every byte unchanged.
package faultnet

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Protocol is the wire protocol a Proxy's cutter reads.
type Protocol int

// Protocols.
const (
	// Raw reads nothing: Cut is not available, toxics are.
	Raw Protocol = iota
	// Postgres is PostgreSQL's frontend/backend protocol (v3).
	Postgres
	// Kafka is Kafka's request/response protocol.
	Kafka
	// ClickHouse is ClickHouse's native TCP protocol.
	ClickHouse
)

func (p Protocol) String() string {
	switch p {
	case Postgres:
		return "postgres"
	case Kafka:
		return "kafka"
	case ClickHouse:
		return "clickhouse"
	}
	return "raw"
}

var (
	serverOnce sync.Once
	server     *toxiproxy.ApiServer
)

// toxiServer returns the process's toxiproxy server object (no HTTP API is
// started: the proxies are driven from Go).
func toxiServer() *toxiproxy.ApiServer {
	serverOnce.Do(func() {
		// The toxics log through zerolog's global logger; nothing else in
		// txsink's tests uses zerolog.
		zerolog.SetGlobalLevel(zerolog.Disabled)
		server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	})
	return server
}

// Proxy is a fault-injecting TCP proxy on 127.0.0.1 in front of one
// upstream. Its methods are safe for concurrent use.
type Proxy struct {
	name     string
	proto    Protocol
	upstream string
	front    *toxiproxy.Proxy
	back     net.Listener

	mu       sync.Mutex
	cuts     []*Cut
	conns    map[*relay]struct{}
	closed   bool
	halfOpen bool
	wg       sync.WaitGroup
}

// New starts a proxy named name (for messages) that listens on listen
// ("127.0.0.1:0" for any free port, or a fixed address that clients learn
// up front, such as a broker's advertised listener) and forwards to
// upstream, reading proto. Close it when done.
func New(name, listen, upstream string, proto Protocol) (*Proxy, error) {
	back, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultnet: %s: %w", name, err)
	}
	p := &Proxy{name: name, proto: proto, upstream: upstream, back: back, conns: map[*relay]struct{}{}}
	p.front = toxiproxy.NewProxy(toxiServer(), name, listen, back.Addr().String())
	if err := p.front.Start(); err != nil {
		back.Close()
		return nil, fmt.Errorf("faultnet: %s: listening on %s: %w", name, listen, err)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Name returns the proxy's name.
func (p *Proxy) Name() string { return p.name }

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.front.Listen }

// Upstream returns the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.front.Stop()
	err := p.back.Close()
	p.closeRelays()
	p.wg.Wait()
	return err
}

// Toxic names (one of each kind at a time).
const (
	toxicLatency   = "faultnet-latency"
	toxicBandwidth = "faultnet-bandwidth"
	toxicHalfOpen  = "faultnet-halfopen"
)

// addToxic adds a toxic in both directions.
func (p *Proxy) addToxic(name, typ string, attrs string) error {
	for _, stream := range []string{"upstream", "downstream"} {
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name+"-"+stream, typ, stream, attrs)
		if _, err := p.front.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return fmt.Errorf("faultnet: %s: %s toxic: %w", p.name, typ, err)
		}
	}
	return nil
}

// Latency delays every chunk of data, both ways, by d (± jitter), on the
// current connections and on new ones, until Heal.
func (p *Proxy) Latency(d, jitter time.Duration) error {
	return p.addToxic(toxicLatency, "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, d.Milliseconds(), jitter.Milliseconds()))
}

// Bandwidth limits each connection to kbps kilobytes per second in each
// direction, until Heal.
func (p *Proxy) Bandwidth(kbps int64) error {
	return p.addToxic(toxicBandwidth, "bandwidth", fmt.Sprintf(`{"rate":%d}`, kbps))
}

// HalfOpen makes every connection, current and new, a black hole: the
// proxy accepts and keeps it open but delivers no byte either way, as a
// peer that vanished without a FIN or RST. Only a client's own timeout
// notices. Heal removes it and closes those connections (data swallowed
// meanwhile cannot be delivered late without corrupting the streams).
func (p *Proxy) HalfOpen() error {
	if err := p.addToxic(toxicHalfOpen, "timeout", `{"timeout":0}`); err != nil {
		return err
	}
	p.mu.Lock()
	p.halfOpen = true
	p.mu.Unlock()
	return nil
}

// Heal removes every toxic. When a half-open state was in force, it also
// closes every connection (clients reconnect).
func (p *Proxy) Heal(ctx context.Context) {
	p.front.Toxics.ResetToxics(ctx)
	p.mu.Lock()
	halfOpen := p.halfOpen
	p.halfOpen = false
	p.mu.Unlock()
	if halfOpen {
		p.DropConnections()
	}
}

// DropConnections closes every current connection; the proxy keeps
// accepting new ones.
func (p *Proxy) DropConnections() {
	p.front.Stop()
	p.closeRelays()
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if !closed {
		_ = p.front.Start()
	}
}

func (p *Proxy) closeRelays() {
	p.mu.Lock()
	rs := make([]*relay, 0, len(p.conns))
	for r := range p.conns {
		rs = append(rs, r)
	}
	p.mu.Unlock()
	for _, r := range rs {
		r.close()
	}
}

// accept runs the cutter stage.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.back.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", p.upstream, 10*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		r := &relay{p: p, client: c, server: up, w: newWatcher(p.proto)}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			r.close()
			return
		}
		p.conns[r] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go r.clientToServer()
		go r.serverToClient()
	}
}

// Arm makes the proxy watch for c's request. Several proxies may share one
// Cut (the brokers of a cluster): it fires once, on whichever sees its
// n-th match.
func (p *Proxy) Arm(c *Cut) error {
	if c.req.proto != p.proto {
		return fmt.Errorf("faultnet: %s reads %s, the cut's request is %s", p.name, p.proto, c.req.proto)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cuts = append(p.cuts, c)
	return nil
}

// Disarm stops watching for c's request.
func (p *Proxy) Disarm(c *Cut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.cuts {
		if x == c {
			p.cuts = append(p.cuts[:i], p.cuts[i+1:]...)
			return
		}
	}
}

// matches reports the armed cut that m is the firing match of, if any.
func (p *Proxy) matches(m message) *Cut {
	p.mu.Lock()
	cuts := append([]*Cut(nil), p.cuts...)
	p.mu.Unlock()
	for _, c := range cuts {
		if c.take(m) {
			return c
		}
	}
	return nil
}

// cutFallback bounds how long an armed connection waits for the reply it
// is to lose; then it is cut anyway (Cut.ReplySeen reports which).
const cutFallback = 10 * time.Second

// relay is one connection through the cutter stage.
type relay struct {
	p              *Proxy
	client, server net.Conn
	w              watcher

	mu  sync.Mutex // guards cut and every call of w
	cut *Cut       // set once a request to cut was forwarded
}

func (r *relay) close() {
	r.client.Close()
	r.server.Close()
	r.p.mu.Lock()
	delete(r.p.conns, r)
	r.p.mu.Unlock()
}

func (r *relay) clientToServer() {
	defer r.p.wg.Done()
	defer r.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.client.Read(buf)
		if n > 0 {
			r.mu.Lock()
			lost := false
			for _, m := range r.w.client(buf[:n]) {
				if r.cut != nil {
					break
				}
				if c := r.p.matches(m); c != nil {
					r.cut = c
					if c.loseRequest {
						// Drop what the client sent with the request
						// and close: the server never sees it.
						c.fire(m, false)
						lost = true
						break
					}
					r.w.arm(m)
					time.AfterFunc(cutFallback, func() {
						if c.fire(m, false) {
							r.close()
						}
					})
				}
			}
			r.mu.Unlock()
			if lost {
				return
			}
			if _, werr := r.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (r *relay) serverToClient() {
	defer r.p.wg.Done()
	defer r.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.server.Read(buf)
		if n > 0 {
			r.mu.Lock()
			cut := r.cut
			out, lose := r.w.server(buf[:n], cut != nil)
			target := r.w.target()
			r.mu.Unlock()
			if len(out) > 0 {
				if _, werr := r.client.Write(out); werr != nil {
					return
				}
			}
			if lose {
				// The reply to the cut request reached the proxy: the
				// server executed the request. Lose the reply and cut the
				// connection.
				cut.fire(target, true)
				return
			}
		}
		if err != nil {
			return
		}
	}
}
