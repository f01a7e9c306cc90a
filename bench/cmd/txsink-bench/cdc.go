package main

// The CDC rows: Debezium-shaped change events of source transactions (one
// to three transfers between 40 accounts, each an update of two accounts
// and an insert, in two topics of three partitions, with BEGIN and END
// records in a transaction topic), applied by exactly_once_sink record by
// record and with source.transactions=whole, one after the other on the
// same records. Both rows report throughput and the p99 of a round's
// duration (the time a committed state takes to appear once its records
// are polled).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const cdcAccounts = 40

// cdcWorkload writes txns source transactions and returns the topics, the
// transaction topic, the records of each, and the transfers made.
func (b *bench) cdcWorkload(ctx context.Context, txns int) (topics []string, txnTopic string, events, txnRecords, transfers int, err error) {
	prefix := b.name("cdc")
	topics = []string{prefix + ".public.accounts", prefix + ".public.transfers"}
	txnTopic = prefix + ".transaction"
	for _, tp := range topics {
		if err = createTopic(ctx, b.bootstrap, tp, 3); err != nil {
			return
		}
	}
	if err = createTopic(ctx, b.bootstrap, txnTopic, 1); err != nil {
		return
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.bootstrap), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		return
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(28, 29))
	lsn := int64(1 << 24)
	event := func(table string, key int, after map[string]any, op, txid string) *kgo.Record {
		lsn += 8
		k, _ := json.Marshal(map[string]any{"id": key})
		v, _ := json.Marshal(map[string]any{"before": nil, "after": after, "op": op, "ts_ms": 1,
			"source":      map[string]any{"connector": "postgresql", "db": "bench", "schema": "public", "table": table, "lsn": lsn, "ts_ms": 1},
			"transaction": map[string]any{"id": fmt.Sprintf("%s:%d", txid, lsn)}})
		return &kgo.Record{Topic: prefix + ".public." + table, Partition: int32(key % 3), Key: k, Value: v}
	}
	balance := make([]int64, cdcAccounts+1)
	var batch []*kgo.Record
	flush := func() error {
		err := cl.ProduceSync(ctx, batch...).FirstErr()
		batch = batch[:0]
		return err
	}
	for i := 1; i <= txns; i++ {
		txid := fmt.Sprint(1000 + i)
		begin, _ := json.Marshal(map[string]any{"status": "BEGIN", "id": txid + ":1", "event_count": nil})
		batch = append(batch, &kgo.Record{Topic: txnTopic, Value: begin})
		n := 0
		for range 1 + rng.IntN(3) {
			from, to := 1+rng.IntN(cdcAccounts), 1+rng.IntN(cdcAccounts)
			amt := int64(1 + rng.IntN(50))
			balance[from] -= amt
			balance[to] += amt
			transfers++
			batch = append(batch,
				event("accounts", from, map[string]any{"id": from, "balance": balance[from]}, "u", txid),
				event("accounts", to, map[string]any{"id": to, "balance": balance[to]}, "u", txid),
				event("transfers", transfers, map[string]any{"id": transfers, "from_id": from, "to_id": to, "amount": amt}, "c", txid))
			n += 3
		}
		events += n
		end, _ := json.Marshal(map[string]any{"status": "END", "id": fmt.Sprintf("%s:%d", txid, lsn), "event_count": n})
		batch = append(batch, &kgo.Record{Topic: txnTopic, Value: end})
		txnRecords += 2
		if len(batch) >= 5000 {
			if err = flush(); err != nil {
				return
			}
		}
	}
	err = flush()
	return
}

// cdc measures the CDC rows (o.CDCTxns source transactions; 0: none).
func (b *bench) cdc(ctx context.Context) error {
	if b.o.CDCTxns <= 0 {
		return nil
	}
	topics, txnTopic, events, txnRecords, transfers, err := b.cdcWorkload(ctx, b.o.CDCTxns)
	if err != nil {
		return fmt.Errorf("cdc workload: %w", err)
	}
	b.logf("pre-loaded %d source transactions: %d change events in %s, %d records in %s", b.o.CDCTxns, events, strings.Join(topics, ", "), txnRecords, txnTopic)
	wname := fmt.Sprintf("cdc %d txns", b.o.CDCTxns)
	modes := []struct {
		name, suffix string
		records      int
		extra        map[string]string
	}{
		{"exactly_once_sink cdc record-at-a-time", "rec", events, nil},
		{"exactly_once_sink cdc source.transactions=whole", "whole", events + txnRecords,
			map[string]string{"source.transactions": "whole", "source.transactions.topic": txnTopic, "tasks.max": "1"}},
	}
	rows := make([]*Row, len(modes))
	rounds := make([][]roundLine, len(modes))
	for i, m := range modes {
		rows[i] = &Row{System: "txsink", Mode: m.name, Workload: wname, Records: m.records, Partitions: 7}
	}
	for run := 0; run < b.o.Runs; run++ {
		for i, m := range modes {
			table := b.name("cdc_" + m.suffix)
			for _, ddl := range []string{
				fmt.Sprintf(`CREATE TABLE %s_accounts (id integer PRIMARY KEY, balance bigint NOT NULL)`, table),
				fmt.Sprintf(`CREATE TABLE %s_transfers (id integer PRIMARY KEY, from_id integer NOT NULL, to_id integer NOT NULL, amount bigint NOT NULL)`, table),
			} {
				if _, err := b.pool.Exec(ctx, ddl); err != nil {
					return err
				}
			}
			settings := map[string]string{
				"connector.class": "postgres", "connection.url": b.dbURL, "delivery.guarantee": "exactly_once_sink",
				"cdc.format": "debezium", "key.converter.schemas.enable": "false", "value.converter.schemas.enable": "false",
			}
			extra := map[string]string{"topics": strings.Join(topics, ","), "table.name.format": table + "_${source.table}"}
			for k, v := range m.extra {
				extra[k] = v
			}
			w := &workload{Name: wname, Topic: strings.Join(topics, ","), Records: m.records}
			res, rl, err := b.drain(ctx, w, table, settings, extra)
			if err == nil {
				var a, tr int
				err = b.pool.QueryRow(ctx, fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s_accounts), (SELECT count(*) FROM %[1]s_transfers)`, table)).Scan(&a, &tr)
				if err == nil && tr != transfers {
					err = fmt.Errorf("%d transfers written, want %d", tr, transfers)
				}
			}
			for _, s := range []string{"accounts", "transfers"} {
				_, _ = b.pool.Exec(context.WithoutCancel(ctx), fmt.Sprintf(`DROP TABLE IF EXISTS %s_%s`, table, s))
			}
			if err != nil {
				return fmt.Errorf("cdc %s: %w", m.name, err)
			}
			rows[i].Runs = append(rows[i].Runs, res)
			rounds[i] = append(rounds[i], rl...)
			b.logf("%s run %d: txsink %s %.0f rec/s, %.1f CPU s, %d rounds", wname, run+1, m.name, res.RPS, res.CPUSeconds, res.Rounds)
		}
	}
	for i, r := range rows {
		r.finish()
		r.Phases, r.Rounds = phases(rounds[i]), len(rounds[i])
		if q, ok := r.Phases["total"]; ok {
			r.Note = fmt.Sprintf("round p99 %.0f ms", q.P99)
		}
		if i > 0 && rows[0].MedianRPS > 0 {
			// Change events per second: this row's records include the
			// transaction topic's.
			r.Note += fmt.Sprintf("; %.0f %% of record-at-a-time's change events/s", 100*r.MedianRPS*float64(events)/float64(r.Records)/rows[0].MedianRPS)
		}
		b.rep.Rows = append(b.rep.Rows, r)
	}
	return nil
}
