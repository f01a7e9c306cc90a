//go:build dbtest

package postgres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/pgtest"
)

// TestColumnNameDeadLettered (issue 25, item 7b): a record with a field
// name no PostgreSQL column can have (over NAMEDATALEN-1 = 63 bytes, a NUL
// byte, invalid UTF-8) is a bad record: with errors.tolerance=all it goes
// to the dead-letter table exactly once, naming the field, and the rest
// of the batch is written; with none the batch stops at exactly that
// record, naming the field. Both through auto.evolve and auto.create.
func TestColumnNameDeadLettered(t *testing.T) {
	srv := pgtest.Start(t)
	long := strings.Repeat("x", 64)
	bad := []string{long, "a\x00b", "bad\xff"}
	batch := func() []*kgo.Record {
		recs := []*kgo.Record{rec("t", 0, nil, js(`{"id":0,"name":"a"}`))}
		for i, f := range bad {
			b, _ := jsonField(f)
			recs = append(recs, rec("t", int64(1+2*i), nil, js(`{"id":%d,"name":"b",%s:1}`, 1+2*i, b)))
			recs = append(recs, rec("t", int64(2+2*i), nil, js(`{"id":%d,"name":"c","color":"red"}`, 2+2*i)))
		}
		return recs
	}
	for _, mode := range []string{"auto.evolve", "auto.create"} {
		t.Run(mode, func(t *testing.T) {
			d := newTestDB(t, srv)
			cfg := WriterConfig{TableNameFormat: "items", ErrorsTolerance: ToleranceAll, DLQTable: "dlq", AutoEvolve: true}
			if mode == "auto.evolve" {
				d.exec(`CREATE TABLE items (id int8 PRIMARY KEY, name text NOT NULL)`)
			} else {
				cfg.AutoCreate = true
			}
			recs := batch()
			// The first record of an auto.create batch has the long name.
			if mode == "auto.create" {
				recs[0], recs[1] = recs[1], recs[0]
				recs[0].Offset, recs[1].Offset = 0, 1
			}
			// tolerance=none: stops at exactly the first bad record. (The
			// record whose name is not UTF-8 may already fail its
			// conversion, which the runtime's pipeline reports before
			// the sink sees the batch: the writer gets the records
			// before it.)
			none := cfg
			none.ErrorsTolerance, none.DLQTable = ToleranceNone, ""
			_, err := d.write(mustWriter(t, none), recs[:5])
			var re *record.Error
			wantOff := int64(1)
			if mode == "auto.create" {
				wantOff = 0
			}
			if !errors.As(err, &re) || re.Offset != wantOff || re.Field != long || !strings.Contains(err.Error(), "63 bytes") {
				t.Fatalf("tolerance=none: %v, want a bad record at offset %d naming the field", err, wantOff)
			}
			// tolerance=all: the three bad records dead-lettered once
			// each, the rest written; a redo changes nothing.
			w := mustWriter(t, cfg)
			stats, err := d.write(w, recs)
			if err != nil {
				t.Fatalf("tolerance=all: %v", err)
			}
			if stats.DeadLettered != 3 {
				t.Errorf("dead-lettered %d, want 3", stats.DeadLettered)
			}
			if n := d.count("items"); n != len(recs)-3 {
				t.Errorf("%d rows written, want %d", n, len(recs)-3)
			}
			got := d.strings(`SELECT kafka_offset || ' ' || (error LIKE '%cannot be a PostgreSQL column name%')::text FROM dlq ORDER BY kafka_offset`)
			// The invalid UTF-8 name may already be refused by the JSON
			// decoder (a bad record too); either way it is dead-lettered.
			if len(got) == 3 {
				got[2] = strings.TrimSuffix(strings.TrimSuffix(got[2], " false"), " true")
			}
			want := []string{"1 true", "3 true", "5"}
			if mode == "auto.create" {
				want[0] = "0 true"
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("dead letters %v, want %v", got, want)
			}
			if errs := d.strings(`SELECT error FROM dlq WHERE error LIKE '%` + long + `%'`); len(errs) != 1 {
				t.Errorf("the long field's dead letter does not name it: %v", errs)
			}
		})
	}
}

// jsonField quotes a field name for a JSON object, keeping invalid UTF-8
// bytes as they are (encoding/json would replace them).
func jsonField(s string) (string, error) {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0:
			b.WriteString(`\u0000`)
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String(), nil
}
