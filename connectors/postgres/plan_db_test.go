//go:build dbtest

package postgres

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/pgtest"
)

// TestPlanPasses runs the passes of a write against a database: a table
// the writer has not read, created (auto.create) from the batch's first
// record and then given the columns of later records (auto.evolve), in
// one transaction; then a stale cached description, read again instead of
// altered.
func TestPlanPasses(t *testing.T) {
	d := newTestDB(t, pgtest.Start(t))
	batch := []*kgo.Record{
		rec("ev", 0, nil, js(`{"id":1,"a":"x"}`)),
		rec("ev", 1, nil, js(`{"id":2,"a":"y","b":5}`)),
		rec("ev", 2, nil, js(`{"id":3,"c":true,"b":6}`)),
	}

	// auto.create alone: the later records' new fields are refused, each
	// naming its first field without a column.
	only := mustWriter(t, WriterConfig{AutoCreate: true, ErrorsTolerance: ToleranceAll, DLQTopic: "dlq"})
	stats, err := d.write(only, batch)
	if err != nil {
		t.Fatal(err)
	}
	if counts(stats) != (statCounts{Written: 1, DeadLettered: 2, SchemaChanges: 1}) || len(stats.Bad) != 2 || stats.Bad[0].Field != "b" || stats.Bad[1].Field != "b" {
		t.Fatalf("auto.create without auto.evolve: %+v", stats)
	}
	d.exec(`DROP TABLE ev`)

	// Both: one CREATE TABLE, one pass adding b and c, every row written.
	w := mustWriter(t, WriterConfig{AutoCreate: true, AutoEvolve: true})
	stats, err = d.write(w, batch)
	if err != nil {
		t.Fatal(err)
	}
	if counts(stats) != (statCounts{Written: 3, SchemaChanges: 3}) {
		t.Errorf("stats %+v, want 3 rows and CREATE + 2 ADD COLUMN", counts(stats))
	}
	if got, want := d.rows("ev"), `(1,x,,) (2,y,5,) (3,,6,t)`; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}

	// Another transaction adds a column: the writer's cached description
	// lacks it, so a record with it makes the write read the table again,
	// with no schema change, even though auto.evolve is off.
	cached := mustWriter(t, WriterConfig{})
	if _, err := d.write(cached, []*kgo.Record{rec("ev", 3, nil, js(`{"id":4}`))}); err != nil {
		t.Fatal(err)
	}
	d.exec(`ALTER TABLE ev ADD COLUMN e text`)
	stats, err = d.write(cached, []*kgo.Record{rec("ev", 4, nil, js(`{"id":5,"e":"new"}`))})
	if err != nil || counts(stats) != (statCounts{Written: 1}) {
		t.Fatalf("a column added behind the cache: %+v, %v", counts(stats), err)
	}
	// A field no column has, read fresh: refused, naming it.
	_, err = d.write(cached, []*kgo.Record{rec("ev", 5, nil, js(`{"id":6,"zz":1}`))})
	var re *record.Error
	if !errors.As(err, &re) || re.Field != "zz" || !errors.Is(err, record.ErrUnknownField) || !strings.Contains(err.Error(), `"public"."ev"`) {
		t.Fatalf("unknown field: %v", err)
	}
}
