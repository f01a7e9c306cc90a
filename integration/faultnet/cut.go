package faultnet

import (
	"fmt"
	"strings"
	"sync"
)

// Request recognises one kind of request in a wire protocol, for a Cut.
// Make one with PostgresQuery, KafkaRequest or ClickHouseInsert.
type Request struct {
	name  string
	proto Protocol
	match func(message) bool
}

// String returns what the request is, e.g. `PostgreSQL "COMMIT PREPARED"`.
func (r Request) String() string { return r.name }

// message is one request as a watcher saw it.
type message struct {
	// text is a PostgreSQL statement or a ClickHouse query (its start).
	text string
	// apiKey, corr and txnID describe a Kafka request.
	apiKey int16
	corr   int32
	txnID  string
}

func (m message) String() string {
	if m.text != "" {
		t := m.text
		if len(t) > 120 {
			t = t[:120] + "…"
		}
		return fmt.Sprintf("%q", t)
	}
	s := fmt.Sprintf("api key %d, correlation id %d", m.apiKey, m.corr)
	if m.txnID != "" {
		s += ", transactional id " + m.txnID
	}
	return s
}

// PostgresQuery matches a PostgreSQL statement (simple query, or the
// execution of an extended-protocol one) whose text starts with prefix,
// ignoring case and leading blanks: "COMMIT PREPARED", or "COMMIT" for a
// local transaction's commit (which does not match "COMMIT PREPARED").
func PostgresQuery(prefix string) Request {
	p := strings.ToLower(strings.TrimSpace(prefix))
	return Request{name: fmt.Sprintf("PostgreSQL %q", prefix), proto: Postgres, match: func(m message) bool {
		t := strings.ToLower(strings.TrimSpace(m.text))
		if !strings.HasPrefix(t, p) {
			return false
		}
		// "COMMIT" must not match "COMMIT PREPARED …".
		rest := strings.TrimSpace(t[len(p):])
		return p != "commit" || rest == "" || rest == ";"
	}}
}

// Kafka API keys that decide a transaction.
const (
	APIKeyEndTxn          int16 = 26
	APIKeyTxnOffsetCommit int16 = 28
)

// KafkaRequest matches a Kafka request with the API key (APIKeyEndTxn, …)
// whose transactional id starts with txnPrefix ("" for any).
func KafkaRequest(apiKey int16, txnPrefix string) Request {
	return Request{name: fmt.Sprintf("Kafka API key %d (transactional id %q…)", apiKey, txnPrefix), proto: Kafka, match: func(m message) bool {
		return m.apiKey == apiKey && strings.HasPrefix(m.txnID, txnPrefix)
	}}
}

// ClickHouseInsert matches a ClickHouse INSERT into a table whose name
// (possibly database-qualified, possibly quoted) ends with table. Its
// reply is the server's answer after the data blocks: the insert is done
// when it is lost.
func ClickHouseInsert(table string) Request {
	tbl := strings.ToLower(table)
	return Request{name: fmt.Sprintf("ClickHouse INSERT INTO %s", table), proto: ClickHouse, match: func(m message) bool {
		f := strings.Fields(strings.ToLower(m.text))
		if len(f) < 3 || f[0] != "insert" || f[1] != "into" {
			return false
		}
		name := strings.Trim(f[2], "`\"")
		if i := strings.IndexByte(name, '('); i >= 0 {
			name = name[:i]
		}
		return name == tbl || strings.HasSuffix(name, "."+tbl) || strings.HasSuffix(name, tbl+"`") || strings.HasSuffix(name, ".`"+tbl)
	}}
}

// Cut loses the reply to the n-th request that matches its Request, on the
// proxies that armed it: the request reaches the server, the reply does
// not reach the client, and the connection is closed. With LoseRequest the
// request itself is lost instead: the connection is closed before it
// reaches the server. Make it with NewCut and give it to Proxy.Arm.
type Cut struct {
	req         Request
	nth         int
	loseRequest bool

	mu        sync.Mutex
	seen      int
	fired     bool
	what      string
	replySeen bool
	done      chan struct{}
}

// NewCut returns a cut of the reply to the n-th (from 1) request matching
// req.
func NewCut(req Request, n int) *Cut {
	return &Cut{req: req, nth: max(n, 1), done: make(chan struct{})}
}

// LoseRequest makes the cut lose the request instead of its reply: the
// bytes the client sent with it are dropped and the connection is closed,
// so the server never executes it. It returns c.
func (c *Cut) LoseRequest() *Cut {
	c.loseRequest = true
	return c
}

// LosesRequest reports whether the cut loses the request (LoseRequest)
// rather than its reply.
func (c *Cut) LosesRequest() bool { return c.loseRequest }

// take counts m when it matches and reports whether it is the one to cut.
func (c *Cut) take(m message) bool {
	if !c.req.match(m) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen++
	return c.seen == c.nth
}

// fire records the cut once and reports whether this call did.
func (c *Cut) fire(m message, replySeen bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fired {
		return false
	}
	c.fired, c.what, c.replySeen = true, m.String(), replySeen
	close(c.done)
	return true
}

// Done is closed once the cut happened.
func (c *Cut) Done() <-chan struct{} { return c.done }

// Fired reports whether the cut happened.
func (c *Cut) Fired() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// ReplySeen reports whether the server's reply reached the proxy before
// the cut (so the server executed the request); false when the cut fell
// back to closing the connection after waiting 10 s for it, and for a cut
// that loses the request.
func (c *Cut) ReplySeen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.replySeen
}

// Matches returns how many matching requests the proxies saw so far.
func (c *Cut) Matches() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen
}

// String describes the cut and, once it happened, the request it hit.
func (c *Cut) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fmt.Sprintf("cut of the reply to %s #%d", c.req, c.nth)
	if c.loseRequest {
		s = fmt.Sprintf("loss of %s #%d", c.req, c.nth)
	}
	if c.fired {
		s += ": " + c.what
		if !c.replySeen && !c.loseRequest {
			s += " (no reply within 10s; connection cut anyway)"
		}
	}
	return s
}

// watcher reads one connection's protocol in the cutter stage.
type watcher interface {
	// client takes bytes the client sent and returns the requests they
	// completed, in order.
	client(b []byte) []message
	// arm says m, returned by client, is the request to cut.
	arm(m message)
	// target returns the armed request.
	target() message
	// server takes bytes the server sent and returns those to forward
	// now; lose reports that the armed request's reply started: the
	// caller drops the rest and cuts the connection.
	server(b []byte, armed bool) (forward []byte, lose bool)
}

func newWatcher(p Protocol) watcher {
	switch p {
	case Postgres:
		return &pgWatcher{startup: true, stmts: map[string]string{}, portals: map[string]string{}}
	case Kafka:
		return &kafkaWatcher{}
	case ClickHouse:
		return &chWatcher{}
	}
	return rawWatcher{}
}

// rawWatcher sees no requests.
type rawWatcher struct{}

func (rawWatcher) client([]byte) []message                { return nil }
func (rawWatcher) arm(message)                            {}
func (rawWatcher) target() message                        { return message{} }
func (rawWatcher) server(b []byte, _ bool) ([]byte, bool) { return b, false }
