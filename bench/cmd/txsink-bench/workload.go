package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// workload is one data set: N records of about ValueBytes each, spread
// round-robin over Partitions partitions of Topic, committed by a
// transactional producer before any sink starts. EnvelopeTopic, when set,
// holds the same records in Kafka Connect's JSON envelope
// ({"schema":…,"payload":…}) for the peer.
type workload struct {
	Name          string
	Topic         string
	EnvelopeTopic string
	// EnvelopeRecords are the first records of the workload, in the
	// envelope topic (the peer is slower; -peer-records bounds its runs).
	EnvelopeRecords int
	EnvelopeEnds    map[int32]int64
	Records         int
	ValueBytes      int
	Partitions      int
	// Ends is, per partition, one past the last record's offset.
	Ends map[int32]int64
	// ProduceSeconds is how long pre-loading took.
	ProduceSeconds float64
}

// row is what one record becomes in PostgreSQL: the table has the columns
// id text, seq bigint, body text (no index, no key).
type row struct {
	ID   string
	Seq  int64
	Body string
}

// makeRow returns record seq of a workload whose JSON values are about
// valueBytes long: the body is padded so that the JSON value
// {"id":"r<seq>","seq":<seq>,"body":"xxx…"} has exactly valueBytes bytes
// (or is as short as it can be).
func makeRow(seq int64, valueBytes int) row {
	id := "r" + strconv.FormatInt(seq, 10)
	// {"id":"","seq":,"body":""} is 26 bytes.
	fixed := 26 + len(id) + len(strconv.FormatInt(seq, 10))
	n := max(valueBytes-fixed, 0)
	body := padding
	if n > len(body) {
		body = strings.Repeat("x", n)
	}
	return row{ID: id, Seq: seq, Body: body[:n]}
}

// padding is where bodies are cut from, so that making a row does not
// allocate its body.
var padding = strings.Repeat("x", 4096)

// json is the row's value. It is written by hand rather than by
// encoding/json: the latency runs make a quarter of a million of these a
// second on the cores the sink runs on, and the load generator should take
// as little of them as it can. IDs ("r" and digits) and bodies (x's) need
// no escaping; TestRowJSON checks the bytes against encoding/json.
func (r row) json() []byte {
	b := make([]byte, 0, 26+len(r.ID)+20+len(r.Body))
	b = append(b, `{"id":"`...)
	b = append(b, r.ID...)
	b = append(b, `","seq":`...)
	b = strconv.AppendInt(b, r.Seq, 10)
	b = append(b, `,"body":"`...)
	b = append(b, r.Body...)
	return append(b, `"}`...)
}

// envelopeSchema is the Connect schema of a row (JsonConverter with
// schemas.enable=true).
const envelopeSchema = `{"type":"struct","name":"txsink.bench.Row","optional":false,"fields":[` +
	`{"field":"id","type":"string","optional":false},` +
	`{"field":"seq","type":"int64","optional":false},` +
	`{"field":"body","type":"string","optional":false}]}`

func (r row) envelope() []byte {
	return []byte(`{"schema":` + envelopeSchema + `,"payload":` + string(r.json()) + `}`)
}

// createTopic creates topic with partitions partitions (replication 1).
func createTopic(ctx context.Context, bootstrap, topic string, partitions int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		return err
	}
	defer cl.Close()
	mb := "16777216"
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), 1, map[string]*string{"max.message.bytes": &mb}, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	return nil
}

// preload writes records 1..n of the workload into topic with a
// transactional producer, txnRecords records per transaction, record seq
// into partition (seq-1) % partitions. It returns the per-partition ends.
func preload(ctx context.Context, bootstrap, topic string, n, valueBytes, partitions int, envelope bool) (map[int32]int64, error) {
	value := row.json
	if envelope {
		value = row.envelope
	}
	return preloadValues(ctx, bootstrap, topic, n, valueBytes, partitions, value)
}

// preloadClient is the transactional producer of the pre-loads: records
// partitioned by hand, uncompressed, in large batches.
func preloadClient(bootstrap, txnID string, opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(bootstrap),
		kgo.TransactionalID(txnID),
		// A topic created a moment ago may have no leader at the first
		// metadata request; the default minimum age (5 s) would wait
		// that long before asking again.
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchMaxBytes(4 << 20),
		kgo.MaxBufferedRecords(200_000),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
	}, opts...)...)
}

// preloadValues is preload with each row's value made by value.
func preloadValues(ctx context.Context, bootstrap, topic string, n, valueBytes, partitions int, value func(row) []byte) (map[int32]int64, error) {
	cl, err := preloadClient(bootstrap, "bench-preload-"+topic, kgo.DefaultProduceTopic(topic))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	const txnRecords = 20_000
	ends := map[int32]int64{}
	for start := 1; start <= n; start += txnRecords {
		if err := cl.BeginTransaction(); err != nil {
			return nil, err
		}
		stop := min(start+txnRecords-1, n)
		errc := make(chan error, 1)
		for seq := start; seq <= stop; seq++ {
			rec := &kgo.Record{Partition: int32((seq - 1) % partitions), Value: value(makeRow(int64(seq), valueBytes))}
			cl.Produce(ctx, rec, func(r *kgo.Record, err error) {
				if err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			return nil, err
		}
		select {
		case err := <-errc:
			return nil, fmt.Errorf("produce to %s: %w", topic, err)
		default:
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return nil, fmt.Errorf("commit preload transaction: %w", err)
		}
	}
	// Ends: the last record of each partition precedes the final commit
	// marker, so the end is the high watermark minus one.
	lo, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	lo.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			ends[o.Partition] = o.Offset - 1
		}
	})
	return ends, nil
}

// createRowTable creates an unindexed table for the rows.
func createRowTable(ctx context.Context, pool *pgxpool.Pool, table string) error {
	_, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{table}.Sanitize()+` (id text NOT NULL, seq bigint NOT NULL, body text NOT NULL)`)
	return err
}

func dropTable(ctx context.Context, pool *pgxpool.Pool, table string) error {
	_, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{table}.Sanitize())
	return err
}

// checkRows verifies that table holds exactly the workload's records, each
// once: n rows, n distinct seqs between 1 and n.
func checkRows(ctx context.Context, pool *pgxpool.Pool, table string, n int) error {
	var cnt, distinct, lo, hi int64
	err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT seq), coalesce(min(seq),0), coalesce(max(seq),0) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&cnt, &distinct, &lo, &hi)
	if err != nil {
		return err
	}
	if cnt != int64(n) || distinct != int64(n) || (n > 0 && (lo != 1 || hi != int64(n))) {
		return fmt.Errorf("table %s: %d rows, %d distinct seqs in [%d,%d], want %d each of 1..%d", table, cnt, distinct, lo, hi, n, n)
	}
	return nil
}
