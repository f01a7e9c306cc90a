package faultnet

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/internal/pgtest"
)

func newProxy(t *testing.T, upstream string, p Protocol) *Proxy {
	t.Helper()
	px, err := New(t.Name(), "127.0.0.1:0", upstream, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}

// viaProxy rewrites a PostgreSQL URL to go through the proxy.
func viaProxy(t *testing.T, dbURL string, px *Proxy) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = px.Addr()
	return u.String()
}

func waitCut(t *testing.T, c *Cut) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not happen (%d matches)", c, c.Matches())
	}
	if !c.ReplySeen() {
		t.Fatalf("%s: the server's reply never reached the proxy", c)
	}
}

// TestPostgresCutCommitPrepared: a real PostgreSQL server executes COMMIT
// PREPARED, the client gets a broken connection instead of the answer,
// and the transaction is committed. A local COMMIT is cut the same way, and
// the "COMMIT" request does not match "COMMIT PREPARED".
func TestPostgresCutCommitPrepared(t *testing.T) {
	srv := pgtest.Start(t)
	db := srv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	if _, err := direct.Exec(ctx, "CREATE TABLE t (v int)"); err != nil {
		t.Fatal(err)
	}
	px := newProxy(t, net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port)), Postgres)

	local := NewCut(PostgresQuery("COMMIT"), 1)
	if err := px.Arm(local); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, viaProxy(t, db, px))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "BEGIN; INSERT INTO t VALUES (1); PREPARE TRANSACTION 'faultnet_1'"); err != nil {
		t.Fatal(err)
	}
	if local.Matches() != 0 {
		t.Fatalf("PREPARE TRANSACTION counted as a COMMIT match")
	}
	px.Disarm(local)

	cut := NewCut(PostgresQuery("COMMIT PREPARED"), 1)
	if err := px.Arm(cut); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "COMMIT PREPARED 'faultnet_1'"); err == nil {
		t.Fatal("COMMIT PREPARED through a cut proxy returned no error")
	}
	waitCut(t, cut)
	conn.Close(ctx)
	var prepared, rows int
	if err := direct.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'faultnet_1'), (SELECT count(*) FROM t)").Scan(&prepared, &rows); err != nil {
		t.Fatal(err)
	}
	if prepared != 0 || rows != 1 {
		t.Fatalf("after the cut: %d prepared, %d rows; want the commit executed (0, 1)", prepared, rows)
	}

	// A local transaction's COMMIT.
	px.Disarm(cut)
	cut = NewCut(PostgresQuery("COMMIT"), 1)
	if err := px.Arm(cut); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, viaProxy(t, db, px))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("COMMIT through a cut proxy returned no error")
	}
	waitCut(t, cut)
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM t WHERE v = 2").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("the cut COMMIT was not executed: %d rows", rows)
	}

	// A lost COMMIT PREPARED request: the transaction stays prepared.
	if _, err := direct.Exec(ctx, "BEGIN; INSERT INTO t VALUES (3); PREPARE TRANSACTION 'faultnet_2'"); err != nil {
		t.Fatal(err)
	}
	px.Disarm(cut)
	cut = NewCut(PostgresQuery("COMMIT PREPARED"), 1).LoseRequest()
	if err := px.Arm(cut); err != nil {
		t.Fatal(err)
	}
	conn3, err := pgx.Connect(ctx, viaProxy(t, db, px))
	if err != nil {
		t.Fatal(err)
	}
	defer conn3.Close(ctx)
	if _, err := conn3.Exec(ctx, "COMMIT PREPARED 'faultnet_2'"); err == nil {
		t.Fatal("a lost COMMIT PREPARED returned no error")
	}
	if !cut.Fired() {
		t.Fatalf("%s did not happen", cut)
	}
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'faultnet_2'").Scan(&prepared); err != nil {
		t.Fatal(err)
	}
	if prepared != 1 {
		t.Fatalf("after losing COMMIT PREPARED the transaction is not prepared any more (%d)", prepared)
	}
	if _, err := direct.Exec(ctx, "ROLLBACK PREPARED 'faultnet_2'"); err != nil {
		t.Fatal(err)
	}
}

// TestKafkaCutEndTxn: an in-memory Kafka (kfake) executes EndTxn, the
// producer's connection is cut before the answer, and the transaction is
// committed: a read_committed consumer sees its records.
func TestKafkaCutEndTxn(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	px := newProxy(t, c.ListenAddrs()[0], Kafka)
	other := NewCut(KafkaRequest(APIKeyEndTxn, "someone-else"), 1)
	cut := NewCut(KafkaRequest(APIKeyEndTxn, "faultnet-"), 1)
	for _, x := range []*Cut{other, cut} {
		if err := px.Arm(x); err != nil {
			t.Fatal(err)
		}
	}
	// Every connection goes through the proxy, whatever address the
	// metadata names.
	dial := kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, px.Addr())
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(px.Addr()), dial, kgo.TransactionalID("faultnet-p"), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("a")}, &kgo.Record{Value: []byte("b")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	endErr := cl.EndTransaction(ctx, kgo.TryCommit)
	waitCut(t, cut)
	if other.Matches() != 0 {
		t.Errorf("a cut for another transactional id matched %d requests", other.Matches())
	}
	t.Logf("%s; EndTransaction returned %v", cut, endErr)

	cons, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := 0
	for got < 2 && ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		got += fs.NumRecords()
	}
	if got != 2 {
		t.Fatalf("read_committed consumer saw %d records, want the 2 of the committed transaction", got)
	}
}

// TestHalfOpenAndHeal: a half-open proxy swallows bytes and keeps the
// connection; Heal closes it, and new connections work again. Data passes
// intact under a bandwidth limit and with latency.
func TestHalfOpenAndHeal(t *testing.T) {
	echo := echoServer(t)
	px := newProxy(t, echo, Raw)
	roundTrip := func(conn net.Conn, msg string) (string, error) {
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		return bufio.NewReader(conn).ReadString('\n')
	}
	if err := px.Bandwidth(64); err != nil {
		t.Fatal(err)
	}
	if err := px.Latency(50*time.Millisecond, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msg := strings.Repeat("x", 20000)
	if got, err := roundTrip(conn, msg); err != nil || got != msg+"\n" {
		t.Fatalf("echo through bandwidth and latency toxics: %d bytes, %v", len(got), err)
	}
	px.Heal(context.Background())

	if err := px.HalfOpen(); err != nil {
		t.Fatal(err)
	}
	_, err = roundTrip(conn, "lost")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("half-open: want a read timeout, got %v", err)
	}
	px.Heal(context.Background())
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := bufio.NewReader(conn).ReadString('\n'); err == nil {
		t.Fatal("after Heal the half-open connection still delivers data; want it closed")
	}
	conn2, err := net.Dial("tcp", px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if got, err := roundTrip(conn2, "again"); err != nil || got != "again\n" {
		t.Fatalf("new connection after Heal: %q, %v", got, err)
	}
}

func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}
