//go:build dbtest

package postgres

import (
	"context"
	"math/big"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/txsink/txsink/internal/pgtest"
)

// TestCopyOpsMatchesPgx: copyOps (the writer's own binary COPY, one plan
// lookup per column and Go type) leaves the same rows as
// pgx.Conn.CopyFrom given the same values, across the column types the
// writer fills and the Go types its coercion makes, NULLs (untyped and
// typed), values pgx encodes only by way of their text (a string into
// int8, numeric, uuid, inet), and a column whose values change Go type
// from row to row. A value neither can encode fails both, and writes
// nothing. A table with a domain column is left to pgx (copyDescribed).
func TestCopyOpsMatchesPgx(t *testing.T) {
	srv := pgtest.Start(t)
	d := newTestDB(t, srv)
	ctx := context.Background()
	d.exec(`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`)
	const cols = `(id int8, t text, v varchar(10), i2 int2, i4 int4, i8 int8, n numeric, f4 float4, f8 float8, b bool,
		ts timestamptz, tsn timestamp, dt date, tm time, u uuid, j json, jb jsonb, by bytea, e mood, ip inet, iv interval,
		ai int4[], at text[])`
	for _, name := range []string{"ours", "theirs"} {
		d.exec(`CREATE TABLE ` + name + ` ` + cols)
	}
	at := time.Date(2026, 12, 7, 21, 30, 0, 123456000, time.UTC)
	num := pgtype.Numeric{Int: big.NewInt(-123456789), Exp: -4, Valid: true}
	str := "pointer"
	rows := [][]any{
		{int64(1), "plain", "short", int16(-2), int32(40000), int64(1 << 40), num, float32(1.5), float64(-2.25), true,
			pgtype.Timestamptz{Time: at, Valid: true}, pgtype.Timestamp{Time: at, Valid: true}, pgtype.Date{Time: at, Valid: true},
			pgtype.Time{Microseconds: 3723000001, Valid: true}, [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
			`{"a": [1, 2]}`, []byte(`{"b": null}`), []byte{0, 1, 0xff}, "happy", netip.MustParsePrefix("10.1.2.3/32"),
			pgtype.Interval{Microseconds: 90061000000, Valid: true}, []any{int64(1), nil, int64(3)}, []any{"x", "y,z", nil}},
		// Every column NULL: untyped nils, and typed ones.
		{int64(2), nil, (*string)(nil), nil, nil, nil, pgtype.Numeric{}, nil, nil, nil,
			pgtype.Timestamptz{}, nil, nil, nil, nil, nil, []byte(nil), nil, nil, nil, nil, nil, []any(nil)},
		// Other Go types in the same columns, and values pgx encodes only
		// through their text.
		{int64(3), &str, "ünïcödé", int64(7), int64(-1), "42", "3.14159", float64(0.1), float32(3), false,
			at, at, at, "01:02:03.5", "0102030405060708090a0b0c0d0e0f10",
			`"s"`, `{"k": "v"}`, []byte("bytes"), "sad", "192.168.0.0/16",
			"1 day 02:03:04", "{4,5}", "{\"q r\",NULL}"},
		// Back to the first row's types: the plan kept must not be reused
		// for the wrong type.
		{int64(4), "again", "x", int16(1), int32(2), int64(3), num, float32(-0.5), float64(1e300), true,
			pgtype.Timestamptz{Time: at.Add(time.Hour), Valid: true}, pgtype.Timestamp{Time: at, InfinityModifier: pgtype.Infinity, Valid: true},
			pgtype.Date{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, pgtype.Time{Microseconds: 0, Valid: true},
			[16]byte{}, `[]`, `{}`, []byte{}, "ok", netip.MustParsePrefix("::1/128"),
			pgtype.Interval{Months: 14, Days: -3, Valid: true}, []any{}, []any{""}},
	}
	// Enough rows that the stream spans several of copyRows' chunks.
	for i := range 3000 {
		r := slices.Clone(rows[i%len(rows)])
		r[0] = int64(100 + i)
		r[1] = strings.Repeat("w", i%97)
		rows = append(rows, r)
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	tbl, err := loadTable(ctx, tx, "public", "ours")
	if err != nil {
		t.Fatal(err)
	}
	if !copyDescribed(tbl.Columns) {
		t.Fatal("a table without domains is not copyDescribed")
	}
	ops := make([]*op, len(rows))
	for i, r := range rows {
		ops[i] = &op{cols: tbl.Columns, vals: r}
	}
	if err := copyOps(ctx, tx, tbl, tbl.Columns, ops); err != nil {
		t.Fatalf("copyOps: %v", err)
	}
	names := make([]string, len(tbl.Columns))
	for i, c := range tbl.Columns {
		names[i] = c.Name
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"theirs"}, names, pgx.CopyFromRows(rows)); err != nil {
		t.Fatalf("pgx CopyFrom: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ours := d.strings(`SELECT x::text FROM ours x ORDER BY id`)
	theirs := d.strings(`SELECT x::text FROM theirs x ORDER BY id`)
	if len(ours) != len(rows) {
		t.Fatalf("copyOps wrote %d rows, want %d", len(ours), len(rows))
	}
	if !slices.Equal(ours, theirs) {
		for i := range min(len(ours), len(theirs)) {
			if ours[i] != theirs[i] {
				t.Fatalf("row %d differs:\n copyOps %s\n pgx     %s", i, ours[i], theirs[i])
			}
		}
		t.Fatalf("%d rows against pgx's %d", len(ours), len(theirs))
	}
	if got := d.strings(`SELECT x::text FROM ours x WHERE id = 2`); len(got) != 1 || strings.Trim(got[0], "(),") != "2" {
		t.Errorf("the NULL row reads %v", got)
	}

	// A value neither can encode: both fail, nothing is written.
	bad := slices.Clone(rows[0])
	bad[0], bad[5] = int64(9), "not a number"
	for _, write := range []struct {
		name string
		fn   func(pgx.Tx) error
	}{
		{"copyOps", func(tx pgx.Tx) error {
			return copyOps(ctx, tx, tbl, tbl.Columns, []*op{{cols: tbl.Columns, vals: rows[0]}, {cols: tbl.Columns, vals: bad}})
		}},
		{"pgx", func(tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{"ours"}, names, pgx.CopyFromRows([][]any{rows[0], bad}))
			return err
		}},
	} {
		err := pgx.BeginFunc(ctx, d.pool, write.fn)
		if err == nil {
			t.Errorf("%s: wrote a row with %q in int8", write.name, "not a number")
		} else if write.name == "copyOps" && !strings.Contains(err.Error(), `column "i8"`) {
			t.Errorf("copyOps's error does not name the column: %v", err)
		}
	}
	if n := d.count("ours"); n != len(rows) {
		t.Errorf("after the failed copies: %d rows, want %d", n, len(rows))
	}

	// A domain column: described by its base type, so left to pgx.
	d.exec(`CREATE DOMAIN positive AS int4 CHECK (VALUE > 0)`)
	d.exec(`CREATE TABLE dom (id int8, p positive)`)
	tx2, err := d.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(ctx)
	dt, err := loadTable(ctx, tx2, "public", "dom")
	if err != nil {
		t.Fatal(err)
	}
	if copyDescribed(dt.Columns) {
		t.Error("a table with a domain column is copyDescribed")
	}
}
