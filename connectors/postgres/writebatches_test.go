//go:build dbtest

package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/pgtest"
)

// TestWriteBatchesMatchesOneByOne: writing a round's batches together
// (WriteBatches, one statement per table) leaves the same rows, the same
// dead letters and the same error, naming the same batch and record, as
// writing them one by one with WriteBatch in one transaction. Random
// rounds of three partitions whose keys collide across partitions, with
// tombstones, records the mapping refuses and records the database
// refuses, under each insert mode and tolerance.
func TestWriteBatchesMatchesOneByOne(t *testing.T) {
	srv := pgtest.Start(t)
	configs := []struct {
		name string
		cfg  WriterConfig
	}{
		{"insert", WriterConfig{}},
		{"insert/tolerance=all", WriterConfig{ErrorsTolerance: "all", DLQTable: "dlq"}},
		{"insert+delete/tolerance=all", WriterConfig{PKMode: "record_key", DeleteEnabled: true, ErrorsTolerance: "all", DLQTable: "dlq"}},
		{"insert+delete", WriterConfig{PKMode: "record_key", DeleteEnabled: true}},
		{"upsert+delete", WriterConfig{InsertMode: "upsert", PKMode: "record_key", DeleteEnabled: true}},
		{"upsert+delete/tolerance=all", WriterConfig{InsertMode: "upsert", PKMode: "record_key", DeleteEnabled: true, ErrorsTolerance: "all", DLQTable: "dlq"}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			for seed := range uint64(8) {
				one, all := newTestDB(t, srv), newTestDB(t, srv)
				for _, d := range []*testDB{one, all} {
					d.exec(`CREATE TABLE ev (id int4 PRIMARY KEY, v text, n int4 CHECK (n >= 0))`)
					d.exec(fmt.Sprintf(dlqDDL, "dlq"))
				}
				rounds := randomRounds(seed, c.cfg.DeleteEnabled)
				for r, round := range rounds {
					cfg := c.cfg
					cfg.TableNameFormat = "ev"
					w1, w2 := mustWriter(t, cfg), mustWriter(t, cfg)
					errOne := writeOneByOne(t, one, w1, round)
					errAll := writeAll(t, all, w2, round)
					if (errOne == nil) != (errAll == nil) || (errOne != nil && errOne.Error() != errAll.Error()) {
						t.Fatalf("seed %d round %d: one by one: %v; together: %v", seed, r, errOne, errAll)
					}
				}
				for _, q := range []string{`SELECT ev::text FROM ev ORDER BY id`,
					`SELECT topic || '/' || partition || '@' || kafka_offset FROM dlq ORDER BY partition, kafka_offset`} {
					a, b := one.strings(q), all.strings(q)
					if strings.Join(a, " ") != strings.Join(b, " ") {
						t.Fatalf("seed %d: %s\none by one: %v\ntogether:   %v", seed, q, a, b)
					}
				}
			}
		})
	}
}

// randomRounds returns rounds of up to three batches (partitions 0-2 of
// topic ev), each continuing its partition's offsets.
func randomRounds(seed uint64, tombstones bool) [][][]*kgo.Record {
	rng := rand.New(rand.NewPCG(seed, 7))
	next := map[int32]int64{}
	var rounds [][][]*kgo.Record
	for range 4 {
		var round [][]*kgo.Record
		for p := range int32(3) {
			if rng.IntN(4) == 0 {
				continue // not in this round
			}
			var recs []*kgo.Record
			for range 1 + rng.IntN(12) {
				id := rng.IntN(10) // keys collide across partitions
				key := fmt.Appendf(nil, `{"id":%d}`, id)
				var v []byte
				switch k := rng.IntN(20); {
				case k == 0:
					v = fmt.Appendf(nil, `{"id":%d,"n":"many"}`, id) // the mapping refuses it
				case k == 1:
					v = fmt.Appendf(nil, `{"id":%d,"n":-1}`, id) // the database refuses it
				case k < 4 && tombstones:
					v = nil
				default:
					v = fmt.Appendf(nil, `{"id":%d,"v":"p%d-%d","n":%d}`, id, p, next[p], rng.IntN(100))
				}
				r := &kgo.Record{Topic: "ev", Partition: p, Offset: next[p], Key: key, Value: v}
				next[p]++
				recs = append(recs, r)
			}
			round = append(round, recs)
		}
		if len(round) > 0 {
			rounds = append(rounds, round)
		}
	}
	return rounds
}

// writeOneByOne writes a round's batches with WriteBatch, in order, in
// one transaction, committed when every one succeeds. The error names the
// batch.
func writeOneByOne(t *testing.T, d *testDB, w *Writer, round [][]*kgo.Record) error {
	return writeRound(t, d, w, round, func(ctx context.Context, tx pgx.Tx, cs []*connectors.Converted) (int, error) {
		for i, c := range cs {
			if _, err := w.WriteBatch(ctx, tx, c, false); err != nil {
				return i, err
			}
		}
		return -1, nil
	})
}

// writeAll writes a round's batches with WriteBatches in one transaction.
func writeAll(t *testing.T, d *testDB, w *Writer, round [][]*kgo.Record) error {
	return writeRound(t, d, w, round, func(ctx context.Context, tx pgx.Tx, cs []*connectors.Converted) (int, error) {
		return w.WriteBatches(ctx, tx, cs, false)
	})
}

// writeRound converts a round's batches and writes them with write in one
// transaction, committed when it succeeds; its error is batchError's.
func writeRound(t *testing.T, d *testDB, w *Writer, round [][]*kgo.Record, write func(context.Context, pgx.Tx, []*connectors.Converted) (int, error)) error {
	t.Helper()
	ctx := context.Background()
	var failed error
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		cs := make([]*connectors.Converted, len(round))
		for i, recs := range round {
			c, err := w.records.Convert(ctx, recs)
			if err != nil {
				return err
			}
			cs[i] = c
		}
		if at, err := write(ctx, tx, cs); err != nil {
			failed = batchError(at, err)
			return failed
		}
		return nil
	})
	if failed != nil {
		return failed
	}
	if err != nil {
		t.Fatal(err)
	}
	return nil
}

// batchError is a write's error as the two ways are compared: the batch
// and, for a bad record, its coordinates.
func batchError(batch int, err error) error {
	var re *record.Error
	if errors.As(err, &re) {
		return fmt.Errorf("batch %d: bad record %s[%d]@%d", batch, re.Topic, re.Partition, re.Offset)
	}
	return fmt.Errorf("batch %d: %v", batch, err)
}
