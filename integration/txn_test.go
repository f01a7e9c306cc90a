package integration

// Source transactions applied whole (issue 28; docs/cdc.md, Source
// transactions). A source PostgreSQL whose transactions move money between
// accounts and record each transfer (balances always sum to the same
// total), Debezium's PostgreSQL connector in a real Kafka Connect worker
// with provide.transaction.metadata=true, two topics of three partitions
// each, and one txsink worker running two connectors side by side into two
// target databases: one with source.transactions=whole, one without (the
// negative control), both exactly_once_sink. The worker is SIGKILLed three
// times while "txsink verify -consistency" samples both targets: every
// sample of the whole connector's target equals the source as of some
// source commit, the control's samples include torn ones, and once drained
// the whole connector's target equals the source row for row.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/verify"
)

const txnAccounts, txnStartBalance = 40, 1000

func TestSourceTransactionsWhole(t *testing.T) {
	samples := envCount(t, "TXSINK_TEST_TXN_SAMPLES", 350, 1)
	k := harness.Kafka(t)
	source := harness.PostgresSource(t)
	target := harness.Postgres(t)
	ctx := context.Background()

	srcURL := source.NewDatabase(t)
	for _, s := range []string{
		`CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL)`,
		`CREATE TABLE transfers (id integer PRIMARY KEY, from_id integer NOT NULL, to_id integer NOT NULL, amount bigint NOT NULL)`,
		fmt.Sprintf(`INSERT INTO accounts SELECT g, %d FROM generate_series(1, %d) g`, txnStartBalance, txnAccounts),
	} {
		if err := execSQL(ctx, srcURL, s); err != nil {
			t.Fatal(err)
		}
	}
	prefix := "tx" + randSuffix(t)
	topics := []string{prefix + ".public.accounts", prefix + ".public.transfers"}
	txnTopic := prefix + ".transaction"
	for _, tp := range topics {
		k.CreateTopic(t, tp, 3)
	}
	k.CreateTopic(t, txnTopic, 1)
	dbz := startDebezium(t, k, debeziumOptions{SourceURL: srcURL, Prefix: prefix, Tables: []string{"public.accounts", "public.transfers"},
		Slot: "slot_" + prefix, Publication: "pub_" + prefix, Extra: map[string]string{"provide.transaction.metadata": "true"}})

	whole, record := target.NewDatabase(t), target.NewDatabase(t)
	common := map[string]string{"delivery.guarantee": "exactly_once_sink", "cdc.columns": "__op,__lsn,__source_ts_ms"}
	wholeCfg := replPostgresConnector("txn-whole", whole, prefix, common)
	wholeCfg["source.transactions"] = "whole"
	wholeCfg["source.transactions.topic"] = txnTopic
	recordCfg := replPostgresConnector("txn-record", record, prefix, common)
	w := startServeWorker(t, k.Bootstrap, "txn-w1", []string{writeConnector(t, wholeCfg), writeConnector(t, recordCfg)})

	// The workload: transactions of one to three transfers, each an
	// UPDATE of two accounts and an INSERT, until the sampling ends.
	var stop atomic.Bool
	var txns, transfers atomic.Int64
	workErr := make(chan error, 1)
	go func() {
		workErr <- func() error {
			conn, err := pgx.Connect(ctx, srcURL)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			r := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
			id := 0
			for !stop.Load() {
				b := &pgx.Batch{}
				for range 1 + r.IntN(3) {
					from, to := 1+r.IntN(txnAccounts), 1+r.IntN(txnAccounts-1)
					if to >= from {
						to++
					}
					amt := int64(1 + r.IntN(50))
					id++
					b.Queue(`UPDATE accounts SET balance = balance - $1 WHERE id = $2`, amt, from)
					b.Queue(`UPDATE accounts SET balance = balance + $1 WHERE id = $2`, amt, to)
					b.Queue(`INSERT INTO transfers VALUES ($1, $2, $3, $4)`, id, from, to, amt)
					transfers.Add(1)
				}
				if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() }); err != nil {
					return err
				}
				txns.Add(1)
				time.Sleep(time.Duration(2+r.IntN(8)) * time.Millisecond)
			}
			return nil
		}()
	}()

	// The initial snapshot is not a source transaction: its rows land as
	// they come. Sampling starts once both targets hold it.
	for _, db := range []string{whole, record} {
		pool := connectPool(t, db)
		waitFor(t, 3*time.Minute, "the snapshot of accounts", func() (bool, string) {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM accounts`).Scan(&n)
			return err == nil && n == txnAccounts, fmt.Sprintf("%d accounts (%v)", n, err)
		})
	}

	// Sampling of both targets, by txsink verify, while the worker is
	// killed.
	type result struct {
		rep verify.ConsistencyReport
		out string
	}
	results := map[string]*result{}
	var wg sync.WaitGroup
	for name, db := range map[string]string{"txn-whole": whole, "txn-record": record} {
		res := &result{}
		results[name] = res
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, code := runVerifyCLI(t, "verify", "-consistency", fmt.Sprint(samples), "-consistency-interval", "100ms",
				"-transaction-topic", txnTopic, "-topics", strings.Join(topics, ","), "-sink-url", db, "-bootstrap", k.Bootstrap, "-output", "json")
			res.out = fmt.Sprintf("exit %d: %s", code, out)
			if err := json.Unmarshal([]byte(out), &res.rep); err != nil {
				res.out += fmt.Sprintf(" (not a report: %v)", err)
			}
		}()
	}
	sampled := make(chan struct{})
	go func() { wg.Wait(); close(sampled) }()
	// The balances in the whole connector's target always sum to the
	// source's total, checked here too (not only by verify).
	sums, badSums := 0, 0
	wholePool := connectPool(t, whole)
	offs := pgOffsets{wholePool, "txn-whole"}
	// A kill comes once the worker committed a round since it started
	// (the whole connector's transaction topic offset moved).
	txnOffset := func() int64 {
		e, err := offs.stored(ctx)
		if err != nil {
			return -1
		}
		return e[txnTopic][0]
	}
	startedAt := txnOffset()
	for done := false; !done; {
		select {
		case <-sampled:
			done = true
		case <-time.After(200 * time.Millisecond):
		}
		if at := txnOffset(); w.kills < 3 && !done && at > startedAt {
			w.kill(t)
			t.Logf("SIGKILL %d of the txsink worker after %d source transactions (transaction topic offset %d)", w.kills, txns.Load(), at)
			w.start(t)
			startedAt = txnOffset()
		}
		if err := dbz.alive(); err != nil {
			t.Fatal(err)
		}
		var n, sum int64
		err := wholePool.QueryRow(ctx, `SELECT count(*), coalesce(sum(balance), 0) FROM accounts`).Scan(&n, &sum)
		if err == nil && n == txnAccounts {
			sums++
			if sum != txnAccounts*txnStartBalance {
				badSums++
			}
		}
	}
	stop.Store(true)
	if err := <-workErr; err != nil {
		t.Fatalf("workload: %v", err)
	}
	if w.kills < 3 {
		t.Fatalf("%d kills before the sampling ended, want 3: raise TXSINK_TEST_TXN_SAMPLES", w.kills)
	}
	t.Logf("workload: %d source transactions, %d transfers", txns.Load(), transfers.Load())
	for _, name := range []string{"txn-whole", "txn-record"} {
		t.Logf("%s: %s", name, results[name].out)
	}
	wr, rr := results["txn-whole"].rep, results["txn-record"].rep
	if wr.Samples < samples || wr.Torn != 0 || wr.Transactions == 0 {
		t.Errorf("source.transactions=whole: %d samples (want %d), %d torn (want 0), %d transactions", wr.Samples, samples, wr.Torn, wr.Transactions)
	}
	if wr.Prefixes < 10 {
		t.Errorf("source.transactions=whole: samples equalled only %d distinct source commits: replication did not progress while sampled", wr.Prefixes)
	}
	if rr.Samples < samples || rr.Torn == 0 || rr.FirstTorn == nil || rr.FirstTorn.Order < 1 {
		t.Errorf("negative control (record at a time): %d samples, %d torn; torn samples expected (is the check blind?)", rr.Samples, rr.Torn)
	} else {
		t.Logf("negative control: first torn sample %+v", *rr.FirstTorn)
	}
	if badSums > 0 || sums == 0 {
		t.Errorf("the whole target's balances summed to another total in %d of %d reads", badSums, sums)
	}

	// Drained, the whole connector's target equals the source. First
	// Debezium delivers every event: the 40 snapshot rows, two account
	// updates and an insert per transfer, a BEGIN and an END per
	// transaction.
	all := append(append([]string{}, topics...), txnTopic)
	var want ends
	waitFor(t, 5*time.Minute, "Debezium's events", func() (bool, string) {
		want = topicEnds(t, k, all)
		var data, meta int64
		for tp, ps := range want {
			for _, e := range ps {
				if tp == txnTopic {
					meta += e
				} else {
					data += e
				}
			}
		}
		wantData, wantMeta := txnAccounts+3*transfers.Load(), 2*txns.Load()
		return data >= wantData && meta >= wantMeta, fmt.Sprintf("%d of %d change events, %d of %d transaction records", data, wantData, meta, wantMeta)
	})
	waitEnds(t, pgOffsets{connectPool(t, whole), "txn-whole"}, want, 2*time.Minute, w.p)
	out, code := runVerifyCLI(t, "verify", "-source-url", srcURL, "-sink-url", whole, "-output", "json")
	var r verify.ReplicaReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("verify output: %v\n%s", err, out)
	}
	if code != 0 || !r.OK() || r.SourceRows != int64(txnAccounts)+transfers.Load() {
		t.Errorf("txn-whole against the source: exit %d, missing %d, extra %d, different %d, %d source rows (want %d)",
			code, r.Missing, r.Extra, r.Different, r.SourceRows, int64(txnAccounts)+transfers.Load())
	}
}
