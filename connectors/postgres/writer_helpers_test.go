//go:build dbtest

package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/internal/pgtest"
)

// testDB is one fresh database on the shared test cluster.
type testDB struct {
	t    testing.TB
	pool *pgxpool.Pool
}

func newTestDB(t testing.TB, srv *pgtest.Server) *testDB {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), srv.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &testDB{t: t, pool: pool}
}

func (d *testDB) exec(sql string, args ...any) {
	d.t.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
}

// write runs w.Write in a transaction, committed when Write succeeds.
func (d *testDB) write(w *Writer, recs []*kgo.Record) (WriteStats, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stats WriteStats
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var err error
		stats, err = w.Write(ctx, tx, recs)
		return err
	})
	return stats, err
}

// strings returns the rows of a one-column query as text ("NULL" for null).
func (d *testDB) strings(sql string, args ...any) []string {
	d.t.Helper()
	rows, err := d.pool.Query(context.Background(), sql, args...)
	if err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	var out []string
	for rows.Next() {
		var s *string
		if err := rows.Scan(&s); err != nil {
			d.t.Fatal(err)
		}
		if s == nil {
			out = append(out, "NULL")
		} else {
			out = append(out, *s)
		}
	}
	if err := rows.Err(); err != nil {
		d.t.Fatalf("%s: %v", sql, err)
	}
	return out
}

func (d *testDB) count(table string) int {
	d.t.Helper()
	var n int
	if err := d.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		d.t.Fatal(err)
	}
	return n
}

func mustWriter(t testing.TB, cfg WriterConfig) *Writer {
	t.Helper()
	if cfg.Connector == "" {
		cfg.Connector = "test"
	}
	w, err := NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// rec builds a record; a nil value is a tombstone.
func rec(topic string, offset int64, key, value []byte) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: 0, Offset: offset, Key: key, Value: value}
}

func js(format string, args ...any) []byte { return []byte(fmt.Sprintf(format, args...)) }

// writeRaw is WriteBatch of Kafka records, converted first through the
// writer's pipeline (as the runtime converts its batches).
func writeRaw(ctx context.Context, w *Writer, tx pgx.Tx, recs []*kgo.Record, schemaChanges bool) (WriteStats, error) {
	c, err := w.records.Convert(ctx, recs)
	if err != nil {
		return WriteStats{}, err
	}
	return w.WriteBatch(ctx, tx, c, schemaChanges)
}
