package integration

// txsink verify -source-url against a ClickHouse copy on the real server:
// the copy is a ReplacingMergeTree(version) with a deletion flag, as the
// clickhouse connector writes change events, holding older versions of
// rows and deletion rows; the check must read it with FINAL, leave the
// deleted rows out, normalise each column type the sink gives Debezium's
// values (Decimal, DateTime, Date, Float32, UInt8, the String forms of
// uuid, jsonb, timestamptz, time and bytea), find it equal, then name a
// missing, an extra and a different row.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/verify"
)

func TestVerifyReplicaClickHouse(t *testing.T) {
	src := harness.Postgres(t)
	ch := harness.ClickHouse(t)
	srcURL := src.NewDatabase(t)
	db := ch.NewDatabase(t)
	conn := ch.Conn(t, db)
	ctx := context.Background()
	if err := execSQL(ctx, srcURL, `CREATE TABLE items (id bigint PRIMARY KEY, sku uuid, qty integer NOT NULL, price numeric(10,2), weight real,
		ok boolean, attrs jsonb, blob bytea, day date, at timestamp(0), atz timestamptz, tod time(3), note text)`); err != nil {
		t.Fatal(err)
	}
	if err := execSQL(ctx, srcURL, `INSERT INTO items SELECT i, md5(i::text)::uuid, i, i * 1.25, i / 7.0, i % 2 = 0,
			jsonb_build_object('i', i, 'k', 'v'), decode(lpad(to_hex(i), 4, '0'), 'hex'), date '2024-01-01' + i,
			timestamp '2024-01-01 00:00:00' + i * interval '1 minute', timestamptz '2024-01-01 00:00:00.5+02' + i * interval '1 hour',
			time '10:00:00.25' + i * interval '1 second', CASE WHEN i % 5 = 0 THEN NULL ELSE 'n' || i END
		FROM generate_series(1, 200) i`); err != nil {
		t.Fatal(err)
	}
	// The types the clickhouse connector's auto.create gives Debezium's
	// schemas on this server (18.16: DateTime, UInt8; current: the same
	// for timestamp(0)).
	chExec(t, conn, "CREATE TABLE items (id Int64, sku String, qty Int32, price Nullable(Decimal(38, 2)), weight Nullable(Float32), "+
		"ok Nullable(UInt8), attrs Nullable(String), blob Nullable(String), day Nullable(Date), at Nullable(DateTime), atz Nullable(String), "+
		"tod Nullable(String), note Nullable(String), _version UInt64, is_deleted UInt8) ENGINE = ReplacingMergeTree(_version) ORDER BY id")
	// Rows as the sink writes them: version = source position; for each
	// id, an older version with other values first, so that only FINAL
	// reads it right; ids 201 and 202 inserted then deleted (deletion rows).
	copyToClickHouse := func(where string, newer bool, deleted uint8, note string) {
		t.Helper()
		rows := pgTexts(t, srcURL, `SELECT id::text, sku::text, qty::text, price::text, weight::text, ok::int::text, attrs::text,
			encode(blob, 'hex'), day::text, at::text, to_char(atz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
			to_char(tod, 'HH24:MI:SS.MS'), `+note+` FROM items WHERE `+where)
		batch, err := conn.PrepareBatch(ctx, "INSERT INTO items (id, sku, qty, price, weight, ok, attrs, blob, day, at, atz, tod, note, _version, is_deleted)")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			id := mustInt(t, *r[0])
			var weight *float32
			if r[4] != nil {
				var f float32
				fmt.Sscan(*r[4], &f)
				weight = &f
			}
			var ok *uint8
			if r[5] != nil {
				v := uint8(mustInt(t, *r[5]))
				ok = &v
			}
			var blob *string
			if r[7] != nil {
				b, err := hex.DecodeString(*r[7])
				if err != nil {
					t.Fatal(err)
				}
				s := string(b)
				blob = &s
			}
			var day, at *time.Time
			if r[8] != nil {
				d, _ := time.Parse(time.DateOnly, *r[8])
				day = &d
			}
			if r[9] != nil {
				a, _ := time.Parse(time.DateTime, *r[9])
				at = &a
			}
			ver := uint64(id * 10)
			if newer {
				ver += 5
			}
			if err := batch.Append(id, *r[1], int32(mustInt(t, *r[2])), r[3], weight, ok, r[6], blob, day, at, r[10], r[11], r[12], ver, deleted); err != nil {
				t.Fatal(err)
			}
		}
		if err := batch.Send(); err != nil {
			t.Fatal(err)
		}
	}
	copyToClickHouse("true", false, 0, "'stale'")
	copyToClickHouse("true", true, 0, "note")
	if err := execSQL(ctx, srcURL, `INSERT INTO items (id, sku, qty) VALUES (201, gen_random_uuid(), 1), (202, gen_random_uuid(), 2)`); err != nil {
		t.Fatal(err)
	}
	copyToClickHouse("id > 200", false, 0, "note")
	copyToClickHouse("id > 200", true, 1, "note")
	if err := execSQL(ctx, srcURL, `DELETE FROM items WHERE id > 200`); err != nil {
		t.Fatal(err)
	}

	sinkURL := fmt.Sprintf("clickhouse://%s:%s@%s/%s", ch.User, ch.Password, ch.Addr, db)
	run := func() (verify.ReplicaReport, string, int) {
		out, code := runVerifyCLI(t, "verify", "-source-url", srcURL, "-sink-url", sinkURL, "-tables", "items", "-output", "json")
		var r verify.ReplicaReport
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("verify output: %v\n%s", err, out)
		}
		text, _ := runVerifyCLI(t, "verify", "-source-url", srcURL, "-sink-url", sinkURL, "-tables", "items")
		return r, text, code
	}
	r, text, code := run()
	t.Logf("equal copy:\n%s", text)
	if code != 0 || !r.OK() || r.SourceRows != 200 || r.TargetRows != 200 || r.Tables[0].Read != "with FINAL, without the rows marked is_deleted" {
		t.Fatalf("exit %d, %+v", code, r)
	}
	if r.Lag.TargetLSN != "0/7E9" { // the greatest version, a deletion row's: 202*10+5
		t.Errorf("target position %q, want 0/7E9 (its greatest version)", r.Lag.TargetLSN)
	}

	// A missing row (a newer deletion row), an extra row, a different
	// value (a newer version with another price).
	chExec(t, conn, "INSERT INTO items (id, sku, qty, _version, is_deleted) SELECT id, sku, qty, _version + 1, 1 FROM items FINAL WHERE id = 10")
	chExec(t, conn, "INSERT INTO items (id, sku, qty, _version, is_deleted) SELECT 999, sku, qty, 99999, 0 FROM items FINAL WHERE id = 11")
	chExec(t, conn, "INSERT INTO items (id, sku, qty, price, weight, ok, attrs, blob, day, at, atz, tod, note, _version, is_deleted) "+
		"SELECT id, sku, qty, price + 1, weight, ok, attrs, blob, day, at, atz, tod, note, _version + 1, 0 FROM items FINAL WHERE id = 12")
	r, text, code = run()
	t.Logf("with differences:\n%s", text)
	if code != 1 || r.Missing != 1 || r.Extra != 1 || r.Different != 1 {
		t.Fatalf("exit %d, missing %d, extra %d, different %d; want 1, 1, 1, 1", code, r.Missing, r.Extra, r.Different)
	}
	for _, want := range []string{"missing   public.items id=10:", "extra     public.items id=999:", "different public.items id=12: price: source 15.00, target 16"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// pgTexts runs a query and returns its rows as text (nil for NULL).
func pgTexts(t *testing.T, u, q string) [][]*string {
	t.Helper()
	pool := connectPool(t, u)
	rows, err := pool.Query(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out [][]*string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		r := make([]*string, len(vals))
		for i, v := range vals {
			if v != nil {
				s := fmt.Sprint(v)
				r[i] = &s
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
