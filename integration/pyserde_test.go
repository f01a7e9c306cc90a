package integration

// Records written by Confluent's own serializers, not ours: the
// confluent-kafka Python package (AvroSerializer, ProtobufSerializer,
// JSONSerializer) registers and frames them against the registry of
// harness.SchemaRegistry (in CI AxonOps Schema Registry, a real one) and
// writes them through a transactional producer that aborts some of its
// transactions (testdata/pyserde_produce.py). txsink reads them with the
// Confluent converters into PostgreSQL and ClickHouse; each table holds
// every committed record once, no aborted one, and each value exactly as
// the serializer was given it.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/integration/harness"
)

// pySerdeSpec is what the serializers' virtualenv holds (latest on PyPI
// when written); .ci/run makes the same virtualenv in the same place.
const (
	pySerdeSpec = "confluent-kafka[avro,json,protobuf,schemaregistry]==2.16.1"
	pySerdeDir  = "confluent-kafka-serdes-2.16.1"
)

// pySerdeVenv returns the virtualenv with Confluent's serializers
// (pyVenvFor).
func pySerdeVenv(t *testing.T) string {
	t.Helper()
	return pyVenvFor(t, pySerdeDir, pySerdeSpec, "Confluent's Python serializers")
}

// pyWant is what a record's columns must hold, as the producer script
// writes it (only the fields of the record's format are set).
type pyWant struct {
	ID     string   `json:"id"`
	Seq    int64    `json:"seq"`
	Amount string   `json:"amount"` // Avro decimal(12,3), as text with its scale
	AtMs   int64    `json:"at_ms"`  // Avro timestamp-millis
	Note   *string  `json:"note"`   // Avro v2's optional field (NULL in v1 records)
	Score  float64  `json:"score"`
	AtUs   int64    `json:"at_us"` // Protobuf google.protobuf.Timestamp, in µs
	Item   string   `json:"item_name"`
	Qty    int32    `json:"item_qty"`
	Tags   []string `json:"tags"`
	Price  float64  `json:"price"`
	OK     bool     `json:"ok"`
	Label  string   `json:"label"`
}

// pySerdeFormat is one format of the test: the converter txsink reads it
// with, its tables' columns and how to read a row back as a pyWant.
type pySerdeFormat struct {
	name, converter string
	cols            string
	query           string // SELECT … FROM %s: the columns in scan's order
	scan            func(pgx.Rows, *pyWant) error
	// chCols are the ClickHouse table's columns; modern servers (22.x and
	// later) have DateTime64 and Bool, 18.16 has neither.
	chCols func(modern bool) string
	// chSel are the ClickHouse columns chRow reads, in its order.
	chSel string
	chRow func(vals []any, w *pyWant) error
}

var pySerdeFormats = []pySerdeFormat{
	{
		name:      "avro",
		converter: "io.confluent.connect.avro.AvroConverter",
		cols:      "id text NOT NULL, seq bigint, amount numeric(12,3), at timestamptz, note text",
		query:     "SELECT id, seq, amount::text, (extract(epoch FROM at) * 1000)::bigint, note FROM ",
		scan: func(r pgx.Rows, w *pyWant) error {
			return r.Scan(&w.ID, &w.Seq, &w.Amount, &w.AtMs, &w.Note)
		},
		chCols: func(modern bool) string {
			return "id String, seq Int64, amount Decimal(12, 3), at " + pick(modern, "DateTime64(3, 'UTC')", "String") + ", note Nullable(String)"
		},
		chSel: "id, seq, amount, at, note",
		chRow: func(v []any, w *pyWant) error {
			w.ID, w.Seq = chString(v[0]), chInt64(v[1])
			amount, err := ratOf(deref(v[2]))
			if err != nil {
				return err
			}
			w.Amount = amount.FloatString(3)
			at, err := chInstant(v[3])
			if err != nil {
				return err
			}
			w.AtMs = at.UnixMilli()
			if note := deref(v[4]); note != nil {
				s := note.(string)
				w.Note = &s
			}
			return nil
		},
	},
	{
		name:      "protobuf",
		converter: "io.confluent.connect.protobuf.ProtobufConverter",
		cols:      "id text NOT NULL, seq bigint, score double precision, at timestamptz, item jsonb, tags text[]",
		query:     "SELECT id, seq, score, (extract(epoch FROM at) * 1000000)::bigint, item->>'name', (item->>'qty')::int, tags FROM ",
		scan: func(r pgx.Rows, w *pyWant) error {
			return r.Scan(&w.ID, &w.Seq, &w.Score, &w.AtUs, &w.Item, &w.Qty, &w.Tags)
		},
		chCols: func(modern bool) string {
			return "id String, seq Int64, score Float64, at " + pick(modern, "DateTime64(6, 'UTC')", "String") + ", item Nullable(String), tags Array(String)"
		},
		chSel: "id, seq, score, at, item, tags",
		chRow: func(v []any, w *pyWant) error {
			w.ID, w.Seq = chString(v[0]), chInt64(v[1])
			w.Score = v[2].(float64)
			at, err := chInstant(v[3])
			if err != nil {
				return err
			}
			w.AtUs = at.UnixMicro()
			// The nested message as JSON text; both fields must be there.
			var item struct {
				Name *string `json:"name"`
				Qty  *int32  `json:"qty"`
			}
			if err := json.Unmarshal([]byte(chString(v[4])), &item); err != nil {
				return fmt.Errorf("item %q: %v", chString(v[4]), err)
			}
			if item.Name == nil || item.Qty == nil {
				return fmt.Errorf("item %q lacks name or qty", chString(v[4]))
			}
			w.Item, w.Qty = *item.Name, *item.Qty
			w.Tags = v[5].([]string)
			return nil
		},
	},
	{
		name:      "jsonschema",
		converter: "io.confluent.connect.json.JsonSchemaConverter",
		cols:      "id text NOT NULL, seq bigint, price double precision, ok boolean, label text",
		query:     "SELECT id, seq, price, ok, label FROM ",
		scan: func(r pgx.Rows, w *pyWant) error {
			return r.Scan(&w.ID, &w.Seq, &w.Price, &w.OK, &w.Label)
		},
		chCols: func(modern bool) string {
			return "id String, seq Int64, price Float64, ok " + pick(modern, "Bool", "UInt8") + ", label String"
		},
		chSel: "id, seq, price, ok, label",
		chRow: func(v []any, w *pyWant) error {
			w.ID, w.Seq = chString(v[0]), chInt64(v[1])
			w.Price = v[2].(float64)
			ok, err := fval(kBool, v[3])
			if err != nil {
				return err
			}
			w.OK = bool(ok.(fbool))
			w.Label = chString(v[4])
			return nil
		},
	},
}

func pick(cond bool, yes, no string) string {
	if cond {
		return yes
	}
	return no
}

// chString and chInt64 read a String and an Int64 column's value.
func chString(v any) string { return deref(v).(string) }
func chInt64(v any) int64   { return deref(v).(int64) }

// chInstant reads a DateTime64 column, or a String one holding the
// instant as RFC 3339 text (what the sink writes on 18.16).
func chInstant(v any) (time.Time, error) {
	switch x := deref(v).(type) {
	case time.Time:
		return x, nil
	case string:
		return time.Parse(time.RFC3339Nano, x)
	}
	return time.Time{}, fmt.Errorf("cannot read %T (%v) as an instant", v, v)
}

// pySerdeSummary is the producer script's last line.
type pySerdeSummary struct {
	Committed   int `json:"committed"`
	TotalTx     int `json:"total_tx"`
	AbortedTx   int `json:"aborted_tx"`
	AbortedRc   int `json:"aborted_records"`
	FatalAborts int `json:"fatal_aborts"`
}

// TestPySerdeFormats: for Avro (two versions of one subject, both
// registered by the serializer, with decimal and timestamp-millis
// logical types), Protobuf (records of a file's second message, with a
// nested message, a repeated field and a Timestamp) and JSON Schema,
// Confluent's Python serializers write TXSINK_TEST_PYSERDE_RECORDS
// (default 50,000) committed records over 3 partitions in transactions of
// equal size, 15 % of them aborted (the test asserts the aborted share of
// transactions and of records the producer reports, >= 10 %). A
// PostgreSQL and a ClickHouse connector with the format's converter drain
// the topic at once; each table holds every committed record once (by
// Kafka coordinates) and no aborted one, and every column equals, as a
// typed value, what the serializer was given.
//
// ClickHouse is the server of TXSINK_TEST_CLICKHOUSE_LANE, so the test
// is in the Makefile's CH26_TESTS too. On lane 26 the PostgreSQL leg is
// skipped: it does not depend on the ClickHouse lane and already ran on
// the default lane (CI's integration shard 3).
func TestPySerdeFormats(t *testing.T) {
	venv := pySerdeVenv(t)
	k := harness.Kafka(t)
	reg := harness.SchemaRegistry(t)
	ch := harness.ClickHouse(t)
	var pg *harness.PostgresService
	if ch.Lane != harness.Lane26 {
		pg = harness.Postgres(t)
	}
	t.Logf("schema registry: %s; ClickHouse lane %s; PostgreSQL leg %v", reg.Kind, ch.Lane, pg != nil)
	records := envCount(t, "TXSINK_TEST_PYSERDE_RECORDS", 50_000, 1)
	txnRecords := min(500, max(records/100, 5)) // >= 100 transactions
	script, err := filepath.Abs(filepath.Join("testdata", "pyserde_produce.py"))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range pySerdeFormats {
		t.Run(f.name, func(t *testing.T) {
			// The formats at once: each has its own topic, producer,
			// tables and connectors; the services are shared.
			t.Parallel()
			if f.name == "protobuf" && !reg.Real {
				// The serializer, with use.latest.version, asks for the
				// latest schema with format=serialized (a base64
				// descriptor); srfake ignores the format and answers with
				// the .proto text, which the client cannot parse.
				t.Skip("srfake does not serve format=serialized, which Confluent's ProtobufSerializer asks for: needs a real registry (TXSINK_TEST_SCHEMA_REGISTRY_BIN or _URL)")
			}
			topic := formatTopic(t, k, "pyserde-"+f.name, 3)
			if f.name == "protobuf" {
				text, err := os.ReadFile(filepath.Join("testdata", "pyserde_event.proto"))
				if err != nil {
					t.Fatal(err)
				}
				reg.Register(t, topic+"-value", sr.Schema{Schema: string(text), Type: sr.TypeProtobuf})
			}

			start := time.Now()
			out := filepath.Join(t.TempDir(), "committed.jsonl")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), script,
				"--bootstrap", k.Bootstrap, "--registry", reg.URL, "--topic", topic, "--format", f.name,
				"--records", strconv.Itoa(records), "--partitions", "3", "--seed", strconv.Itoa(3000+i),
				"--txn-records", strconv.Itoa(txnRecords), "--abort-ratio", "0.15", "--out", out)
			cmd.Stderr = &strings.Builder{}
			stdout, err := cmd.Output()
			if err != nil {
				t.Fatalf("producer script: %v\n%s", err, tail(cmd.Stderr.(*strings.Builder).String(), 3000))
			}
			var sum pySerdeSummary
			if err := json.Unmarshal([]byte(lastLine(string(stdout))), &sum); err != nil {
				t.Fatalf("producer summary %q: %v", stdout, err)
			}
			if sum.Committed < records || sum.AbortedTx*10 < sum.TotalTx || sum.AbortedRc*10 < sum.AbortedRc+sum.Committed {
				t.Fatalf("workload: %d committed records (want >= %d), %d of %d transactions and %d of %d records aborted, want >= 10 %% of each",
					sum.Committed, records, sum.AbortedTx, sum.TotalTx, sum.AbortedRc, sum.AbortedRc+sum.Committed)
			}
			u, want := readPyCommitted(t, out)
			if u.total() != sum.Committed || len(want) != sum.Committed {
				t.Fatalf("producer says %d committed, its file %d records (%d ids)", sum.Committed, u.total(), len(want))
			}
			t.Logf("%s: Confluent's serializer wrote %d committed records and %d aborted ones (%.1f %%; %d/%d transactions of %d aborted; %d aborts needed a new producer) in %v",
				f.name, sum.Committed, sum.AbortedRc, 100*float64(sum.AbortedRc)/float64(sum.AbortedRc+sum.Committed),
				sum.AbortedTx, sum.TotalTx, txnRecords, sum.FatalAborts, time.Since(start).Round(time.Millisecond))

			// The tables first, then both connectors at once.
			var pool *pgxpool.Pool
			var pgProc *proc
			pgName, chName := topic+"-pg", topic+"-ch"
			if pg != nil {
				db := pg.NewDatabase(t)
				pool = connectPool(t, db)
				if _, err := pool.Exec(context.Background(), "CREATE TABLE "+pgx.Identifier{topic}.Sanitize()+" ("+f.cols+
					", __connect_topic text, __connect_partition int, __connect_offset bigint, rn bigserial)"); err != nil {
					t.Fatal(err)
				}
				cfg := baseConnector(pgName, topic, db, "exactly_once")
				cfg["value.converter"] = f.converter
				cfg["value.converter.schema.registry.url"] = reg.URL
				pgProc = startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "w-"+pgName)
			}
			chDB := ch.NewDatabase(t)
			chConn := ch.Conn(t, chDB)
			chCols := f.chCols(chModern(t, chConn))
			chExec(t, chConn, "CREATE TABLE `"+topic+"` ("+chCols+
				", __connect_topic String, __connect_partition Int32, __connect_offset Int64) ENGINE = "+chEngine(ch, chDB, topic, 100))
			cfg := chConnector(chName, topic, ch, chDB, "exactly_once")
			cfg["value.converter"] = f.converter
			cfg["value.converter.schema.registry.url"] = reg.URL
			start = time.Now()
			chProc := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "w-"+chName)

			if pg != nil {
				waitDrained(t, pool, pgName, u, 5*time.Minute, procAlive(pgProc))
				t.Logf("%s: PostgreSQL drained in %v", f.name, time.Since(start).Round(time.Millisecond))
			}
			chWaitDrained(t, chConn, chName, u, 5*time.Minute, procAlive(chProc))
			t.Logf("%s: ClickHouse drained in %v", f.name, time.Since(start).Round(time.Millisecond))
			stopTxsink(t, chProc)
			if pg != nil {
				stopTxsink(t, pgProc)
				// Avro's two versions are written in groups of the same
				// columns, out of offset order: exactness without the
				// order check.
				if problems := exactness(u, readRows(t, pool, topic), anyOrder); len(problems) > 0 {
					t.Fatalf("PostgreSQL: %d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
				}
				checkPyValues(t, pool, f, pgx.Identifier{topic}.Sanitize(), want)
			}
			chExact(t, chConn, u, topic, topic)
			checkPyValuesCH(t, chConn, f, chCols, topic, want)
		})
	}
}

// readPyCommitted reads the producer script's committed records: the
// upstream log (coordinates and ids, in offset order per partition) and
// each id's expected columns.
func readPyCommitted(t *testing.T, path string) (*upstream, map[string]pyWant) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	u := &upstream{committed: map[int32][]upRecord{}}
	want := map[string]pyWant{}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			P    int32  `json:"p"`
			O    int64  `json:"o"`
			Want pyWant `json:"want"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		u.committed[r.P] = append(u.committed[r.P], upRecord{Partition: r.P, Offset: r.O, ID: r.Want.ID, Seq: int(r.Want.Seq)})
		want[r.Want.ID] = r.Want
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, rs := range u.committed {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
	}
	return u, want
}

// checkPyValues compares every row of table with what its record's
// serializer was given.
func checkPyValues(t *testing.T, pool *pgxpool.Pool, f pySerdeFormat, table string, want map[string]pyWant) {
	t.Helper()
	rows, err := pool.Query(context.Background(), f.query+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	var problems []string
	for rows.Next() {
		var got pyWant
		if err := f.scan(rows, &got); err != nil {
			t.Fatal(err)
		}
		n++
		if w, ok := want[got.ID]; !ok {
			problems = append(problems, "unexpected id "+got.ID)
		} else if !reflect.DeepEqual(got, w) {
			g, _ := json.Marshal(got)
			e, _ := json.Marshal(w)
			problems = append(problems, string(g)+" want "+string(e))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("PostgreSQL %s: %d of %d rows differ, first: %s", f.name, len(problems), n, strings.Join(problems[:min(5, len(problems))], "; "))
	}
	if n != len(want) {
		t.Fatalf("PostgreSQL %s: %d rows, want %d", f.name, n, len(want))
	}
	t.Logf("PostgreSQL %s: %d rows, each column (%s) equal to what the serializer was given", f.name, n, f.cols)
}

// checkPyValuesCH compares every row of the ClickHouse table with what
// its record's serializer was given.
func checkPyValuesCH(t *testing.T, conn driver.Conn, f pySerdeFormat, cols, table string, want map[string]pyWant) {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT "+f.chSel+" FROM `"+table+"`")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	n := 0
	var problems []string
	for rows.Next() {
		vals := scanCHRow(t, rows, types)
		n++
		var got pyWant
		if err := f.chRow(vals, &got); err != nil {
			problems = append(problems, fmt.Sprintf("row %v: %v", vals, err))
		} else if w, ok := want[got.ID]; !ok {
			problems = append(problems, "unexpected id "+got.ID)
		} else if !reflect.DeepEqual(got, w) {
			g, _ := json.Marshal(got)
			e, _ := json.Marshal(w)
			problems = append(problems, string(g)+" want "+string(e))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("ClickHouse %s: %d of %d rows differ, first: %s", f.name, len(problems), n, strings.Join(problems[:min(5, len(problems))], "; "))
	}
	if n != len(want) {
		t.Fatalf("ClickHouse %s: %d rows, want %d", f.name, n, len(want))
	}
	t.Logf("ClickHouse %s: %d rows, each column (%s) equal to what the serializer was given", f.name, n, cols)
}
