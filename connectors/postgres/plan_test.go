package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/dbztest"
)

// The plan of a batch, without a database: tables are described by hand
// and given to the plan as a catalog snapshot.

// ptCol is a column of a hand-made table.
type ptCol struct {
	name    string
	kind    colKind
	notNull bool
	hasDef  bool
}

// ptTable describes a table as loadTable would.
func ptTable(name string, pk []string, cols ...ptCol) *table {
	t := &table{Schema: "public", Name: name, Ident: `"public"."` + name + `"`, byName: map[string]*column{}, PrimaryKey: pk}
	if pk != nil {
		t.Unique = [][]string{pk}
	}
	for _, pc := range cols {
		c := &column{Name: pc.name, Index: len(t.Columns), Type: pgType{Name: pc.kind.String(), Kind: pc.kind}, NotNull: pc.notNull, HasDef: pc.hasDef, MaxLen: -1}
		t.Columns = append(t.Columns, c)
		t.byName[c.Name] = c
	}
	return t
}

// The tables of the cases.
func ptTables() map[string]*table {
	return map[string]*table{
		"t": ptTable("t", []string{"id"},
			ptCol{name: "id", kind: kindText, notNull: true}, ptCol{name: "n", kind: kindInt8}, ptCol{name: "flag", kind: kindBool},
			ptCol{name: "dflt", kind: kindText, notNull: true, hasDef: true}),
		"strict": ptTable("strict", nil, ptCol{name: "id", kind: kindText}, ptCol{name: "must", kind: kindText, notNull: true}),
		"k": ptTable("k", []string{"__connect_topic", "__connect_partition", "__connect_offset"},
			ptCol{name: "__connect_topic", kind: kindText, notNull: true}, ptCol{name: "__connect_partition", kind: kindInt4, notNull: true},
			ptCol{name: "__connect_offset", kind: kindInt8, notNull: true}, ptCol{name: "n", kind: kindInt8}),
		"items": ptTable("items", []string{"id"},
			ptCol{name: "id", kind: kindInt4, notNull: true}, ptCol{name: "name", kind: kindText, notNull: true}, ptCol{name: "qty", kind: kindInt4}),
		"odd": ptTable("odd", nil, ptCol{name: "id", kind: kindText}, ptCol{name: "geo", kind: kindUnsupported}),
	}
}

// ptRec is a record of topic at offset; "" is a null key or value.
func ptRec(topic string, offset int64, key, value string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Offset: offset}
	if key != "" {
		r.Key = []byte(key)
	}
	if value != "" {
		r.Value = []byte(value)
	}
	return r
}

// ptEvents are Debezium change events of dbztest's items table from offset 0.
func ptEvents(evs ...dbztest.Event) []*kgo.Record {
	tbl := &dbztest.Table{Server: "src", DB: "shop", Schema: "public", Name: "items",
		Columns: []dbztest.Column{{Name: "id", Type: "int32"}, {Name: "name", Type: "string"}, {Name: "qty", Type: "int32", Optional: true}},
		Key:     []string{"id"}}
	var out []*kgo.Record
	for i, e := range evs {
		k, v := tbl.JSON(e)
		out = append(out, &kgo.Record{Topic: tbl.Topic(), Offset: int64(i), Key: k, Value: v})
	}
	return out
}

// describe renders a plan: per table its ops (ins: ordered insert, up:
// keyed upsert, del: delete, del*: the delete of a moved key, trunc),
// then the refused records, the tables to read and the schema changes.
func describe(p *batchPlan) string {
	var parts []string
	for _, tp := range p.tables {
		if tp.wait || tp.e.m == nil || len(tp.ops) == 0 {
			continue
		}
		var ops []string
		for _, o := range tp.ops {
			kind := "ins"
			switch {
			case o.trunc:
				ops = append(ops, "trunc")
				continue
			case o.del && o.extra:
				kind = "del*"
			case o.del:
				kind = "del"
			case o.keyed:
				kind = "up"
			}
			vals := make([]string, len(o.cols))
			for i, c := range o.cols {
				vals[i] = fmt.Sprintf("%s=%v", c.Name, o.vals[i])
			}
			ops = append(ops, kind+"("+strings.Join(vals, ",")+")")
		}
		parts = append(parts, tp.e.name+": "+strings.Join(ops, " "))
	}
	for _, b := range p.bad {
		parts = append(parts, fmt.Sprintf("bad @%d %s: %s", b.Offset, b.Field, cause(b)))
	}
	for _, r := range p.reads {
		parts = append(parts, "read "+r)
	}
	for _, ch := range p.changes {
		if ch.create != "" {
			parts = append(parts, "create "+ch.create)
			continue
		}
		var cols []string
		for _, c := range ch.columns {
			cols = append(cols, c.name+" "+c.typ)
		}
		parts = append(parts, "evolve "+ch.table+" +"+strings.Join(cols, " +"))
	}
	if p.noopDeletes+p.noopTruncates > 0 {
		parts = append(parts, fmt.Sprintf("no-ops %d+%d", p.noopDeletes, p.noopTruncates))
	}
	return strings.Join(parts, "; ")
}

// cause names a bad record's kind of error.
func cause(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{record.ErrUnknownField, "unknown field"}, {record.ErrCoerce, "coerce"}, {record.ErrMissingKey, "missing key"},
		{record.ErrTombstone, "tombstone"}, {record.ErrDecode, "decode"}, {record.ErrTruncate, "truncate"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return err.Error()
}

// ptPlan plans recs with cfg against a snapshot of tables: fresh (read
// in this write), cached, or absent ("" below: not in the snapshot).
func ptPlan(t *testing.T, cfg WriterConfig, cdc map[string]string, snapshot map[string]string, recs []*kgo.Record, ddl bool) (*batchPlan, *catalog, error) {
	t.Helper()
	cfg.Connector = "plan"
	if cdc != nil {
		pipe, err := convert.PipelineFromSettings(cdc)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Pipeline = pipe
	}
	w, err := NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tables := ptTables()
	cat := newCatalog("public", nil)
	for name, state := range snapshot {
		switch state {
		case "fresh":
			cat.set(w, name, tables[name], true)
		case "cached":
			cat.set(w, name, tables[name], false)
		case "none": // known not to exist
			cat.set(w, name, nil, true)
		default:
			t.Fatalf("snapshot state %q", state)
		}
	}
	ctx := context.Background()
	c, err := w.records.Convert(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := w.plan(ctx, cat, c, ddl)
	return p, cat, err
}

func TestPlan(t *testing.T) {
	fresh := map[string]string{"t": "fresh"}
	ev := func(op byte, before, after dbztest.Row) dbztest.Event {
		return dbztest.Event{Op: op, Before: before, After: after, LSN: 10}
	}
	item := func(id int, name string, qty any) dbztest.Row { return dbztest.Row{"id": id, "name": name, "qty": qty} }
	cases := []struct {
		name     string
		cfg      WriterConfig
		cdc      map[string]string
		snapshot map[string]string
		recs     []*kgo.Record
		shared   bool   // in a shared round: no schema changes
		want     string // describe's rendering
		wantErr  error  // instead of a plan
	}{
		{
			name: "values coerced to their columns", snapshot: fresh,
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a","n":"42","flag":"yes"}`), ptRec("t", 1, "", `{"id":7,"n":1e2,"flag":0}`)},
			want: "t: ins(id=a,n=42,flag=true) ins(id=7,n=100,flag=false)",
		},
		{
			name: "nullable and defaulted columns left out, an explicit null kept", snapshot: fresh,
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a"}`), ptRec("t", 1, "", `{"id":"b","n":null}`)},
			want: "t: ins(id=a) ins(id=b,n=<nil>)",
		},
		{
			name: "a value a column cannot hold is refused, naming the field", snapshot: fresh,
			cfg:  WriterConfig{ErrorsTolerance: ToleranceAll, DLQTopic: "dlq"},
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a","n":"x"}`), ptRec("t", 1, "", `{"id":"b","flag":"maybe"}`), ptRec("t", 2, "", `{"id":"c"}`)},
			want: "t: ins(id=c); bad @0 n: coerce; bad @1 flag: coerce",
		},
		{
			name: "tolerance none: the first bad record ends the plan", snapshot: fresh,
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a"}`), ptRec("t", 1, "", `{"id":null}`), ptRec("t", 2, "", `{"id":"c"}`)},
			want: "t: ins(id=a); bad @1 id: coerce",
		},
		{
			name: "NOT NULL column without default and no value", snapshot: map[string]string{"strict": "fresh"},
			cfg:  WriterConfig{TableNameFormat: "strict"},
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a"}`)},
			want: "bad @0 must: coerce",
		},
		{
			name: "unknown field without auto.evolve", snapshot: fresh,
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a","color":"red"}`)},
			want: "bad @0 color: unknown field",
		},
		{
			name: "unknown fields with auto.evolve: one change with every new column", snapshot: fresh,
			cfg: WriterConfig{AutoEvolve: true},
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a"}`), ptRec("t", 1, "", `{"id":"b","color":"red"}`),
				ptRec("t", 2, "", `{"id":"c","size":3,"color":"blue"}`)},
			want: `t: ins(id=a); evolve t +color text +size bigint`,
		},
		{
			name: "auto.evolve refuses a field no column can be named", snapshot: fresh,
			cfg:  WriterConfig{AutoEvolve: true, ErrorsTolerance: ToleranceAll, DLQTopic: "dlq"},
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a","ok":1,"`+strings.Repeat("x", 64)+`":1}`), ptRec("t", 1, "", `{"id":"b","new":true}`)},
			want: "bad @0 " + strings.Repeat("x", 64) + ": unknown field; evolve t +new boolean",
		},
		{
			name: "auto.evolve in a shared round", snapshot: fresh, shared: true,
			cfg:     WriterConfig{AutoEvolve: true},
			recs:    []*kgo.Record{ptRec("t", 0, "", `{"id":"b","color":"red"}`)},
			wantErr: ErrSchemaChange,
		},
		{
			name: "a cached table lacking a field is read again, not refused nor altered", snapshot: map[string]string{"t": "cached"},
			cfg:  WriterConfig{AutoEvolve: true},
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a","color":"red"}`), ptRec("t", 1, "", `{"id":"b","size":1}`)},
			want: "read t",
		},
		{
			name: "a table the snapshot lacks is read", snapshot: nil,
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a"}`)},
			want: "read t",
		},
		{
			name: "auto.create from the first record with a value; deletes before it are no-ops", snapshot: map[string]string{"t": "none"},
			cfg: WriterConfig{AutoCreate: true, PKMode: PKModeRecordKey, DeleteEnabled: true},
			recs: []*kgo.Record{ptRec("t", 0, `{"id":"a"}`, ""), ptRec("t", 1, `{"id":"b"}`, `{"n":1,"flag":true}`),
				ptRec("t", 2, `{"id":"c"}`, `{"n":2,"extra":"x"}`)},
			want: `create CREATE TABLE "public"."t" ("id" text NOT NULL, "n" bigint, "flag" boolean, PRIMARY KEY ("id")); no-ops 1+0`,
		},
		{
			name: "auto.create in a shared round", snapshot: map[string]string{"t": "none"}, shared: true,
			cfg:     WriterConfig{AutoCreate: true},
			recs:    []*kgo.Record{ptRec("t", 0, "", `{"id":"a"}`)},
			wantErr: ErrSchemaChange,
		},
		{
			name: "pk.mode=record_key: key columns from the key", snapshot: fresh,
			cfg:  WriterConfig{PKMode: PKModeRecordKey},
			recs: []*kgo.Record{ptRec("t", 0, `{"id":"k"}`, `{"n":1}`), ptRec("t", 1, `"p"`, `{"id":"ignored","n":2}`), ptRec("t", 2, "", `{"n":3}`)},
			want: "t: ins(id=k,n=1) ins(id=p,n=2); bad @2 : missing key",
		},
		{
			name: "upsert: keyed ops, a key's ops all planned (the apply keeps the last)", snapshot: fresh,
			cfg:  WriterConfig{InsertMode: InsertModeUpsert, PKMode: PKModeRecordValue},
			recs: []*kgo.Record{ptRec("t", 0, "", `{"id":"a","n":1}`), ptRec("t", 1, "", `{"id":"a","n":2}`), ptRec("t", 2, "", `{"n":3}`)},
			want: "t: up(id=a,n=1) up(id=a,n=2); bad @2 id: coerce",
		},
		{
			name: "pk.mode=kafka: the record's coordinates", snapshot: map[string]string{"k": "fresh"},
			cfg:  WriterConfig{PKMode: PKModeKafka},
			recs: []*kgo.Record{ptRec("k", 5, "", `{"n":1}`)},
			want: "k: ins(__connect_topic=k,__connect_partition=0,__connect_offset=5,n=1)",
		},
		{
			name: "pk.fields naming no column is the table's fault, not the record's", snapshot: fresh,
			cfg:     WriterConfig{PKMode: PKModeRecordValue, PKFields: []string{"nope"}},
			recs:    []*kgo.Record{ptRec("t", 0, "", `{"id":"a"}`)},
			wantErr: errors.New(`pk.fields: table "public"."t" has no column "nope"`),
		},
		{
			name: "tombstones with delete.enabled: deletes by key, in order with inserts", snapshot: fresh,
			cfg:  WriterConfig{PKMode: PKModeRecordKey, DeleteEnabled: true},
			recs: []*kgo.Record{ptRec("t", 0, `"a"`, `{"n":1}`), ptRec("t", 1, `"a"`, ""), ptRec("t", 2, `"b"`, `{"n":2}`)},
			want: "t: ins(id=a,n=1) del(id=a) ins(id=b,n=2)",
		},
		{
			name: "tombstones without delete.enabled are refused", snapshot: fresh,
			cfg:  WriterConfig{PKMode: PKModeRecordKey, ErrorsTolerance: ToleranceAll, DLQTopic: "dlq"},
			recs: []*kgo.Record{ptRec("t", 0, `"a"`, ""), ptRec("t", 1, `"b"`, `{"n":2}`)},
			want: "t: ins(id=b,n=2); bad @0 : tombstone",
		},
		{
			name: "change events: by the key whatever insert.mode says, a moved key deleted first", snapshot: map[string]string{"items": "fresh"},
			cfg: WriterConfig{TableNameFormat: "${source.table}"}, cdc: map[string]string{},
			recs: ptEvents(ev('c', nil, item(1, "a", 1)), ev('u', item(1, "a", 1), item(1, "a2", nil)), ev('d', item(1, "a2", nil), nil),
				ev('u', item(3, "c", 3), item(30, "c", 3))),
			want: "items: up(id=1,name=a,qty=1) up(id=1,name=a2,qty=<nil>) del(id=1) del*(id=3) up(id=30,name=c,qty=3)",
		},
		{
			name: "a truncate event (cdc.truncate=apply)", snapshot: map[string]string{"items": "fresh"},
			cfg: WriterConfig{TableNameFormat: "items"}, cdc: map[string]string{convert.KeyCDCTruncate: "apply"},
			recs: ptEvents(ev('c', nil, item(1, "a", 1)), dbztest.Event{Op: 't', LSN: 20}),
			want: "items: up(id=1,name=a,qty=1) trunc",
		},
		{
			name: "a truncate event in a shared round", snapshot: map[string]string{"items": "fresh"}, shared: true,
			cfg: WriterConfig{TableNameFormat: "items"}, cdc: map[string]string{convert.KeyCDCTruncate: "apply"},
			recs:    ptEvents(dbztest.Event{Op: 't', LSN: 20}),
			wantErr: ErrSchemaChange,
		},
		{
			name: "a column type txsink cannot write", snapshot: map[string]string{"odd": "fresh"},
			cfg:     WriterConfig{TableNameFormat: "odd"},
			recs:    []*kgo.Record{ptRec("t", 0, "", `{"id":"a","geo":"x"}`)},
			wantErr: ErrUnsupportedColumn,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := ptPlan(t, tc.cfg, tc.cdc, tc.snapshot, tc.recs, !tc.shared)
			switch {
			case tc.wantErr != nil && err == nil:
				t.Fatalf("plan %q, want error %v", describe(p), tc.wantErr)
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) && !strings.Contains(err.Error(), tc.wantErr.Error()) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("error %v, want plan %q", err, tc.want)
			default:
				if got := describe(p); got != tc.want {
					t.Errorf("plan\n got %s\nwant %s", got, tc.want)
				}
			}
		})
	}
}

// TestPlanAgainAfterChange: the plan after a schema change is made against
// the changed table (as WriteBatch reads it again) and is complete; a
// table altered by auto.evolve that still lacks a column is an error
// naming it, not a third pass.
func TestPlanAgainAfterChange(t *testing.T) {
	cfg := WriterConfig{Connector: "plan", AutoEvolve: true}
	w, err := NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	recs := []*kgo.Record{ptRec("t", 0, "", `{"id":"a","color":"red"}`), ptRec("t", 1, "", `{"id":"b","n":2}`)}
	ctx := context.Background()
	c, err := w.records.Convert(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	cat := newCatalog("public", nil)
	cat.set(w, "t", ptTables()["t"], true)
	p, err := w.plan(ctx, cat, c, true)
	if err != nil || describe(p) != "t: ins(id=b,n=2); evolve t +color text" {
		t.Fatalf("first pass: %q, %v", describe(p), err)
	}

	// What changeSchema leaves: the table as read again, altered.
	evolved := ptTable("t", []string{"id"}, ptCol{name: "id", kind: kindText, notNull: true}, ptCol{name: "n", kind: kindInt8},
		ptCol{name: "color", kind: kindText})
	cat.set(w, "t", evolved, true)
	cat.entries["t"].evolved, cat.entries["t"].changed = true, true
	p, err = w.plan(ctx, cat, c, true)
	if err != nil || describe(p) != "t: ins(id=a,color=red) ins(id=b,n=2)" {
		t.Fatalf("second pass: %q, %v", describe(p), err)
	}

	// Negative control: had the change not given the table its column,
	// the second pass does not ask for another change.
	cat.set(w, "t", ptTables()["t"], true)
	_, err = w.plan(ctx, cat, c, true)
	if err == nil || !strings.Contains(err.Error(), `"public"."t"`) || !strings.Contains(err.Error(), "color") {
		t.Fatalf("second pass against an unchanged table: %v, want an error naming the table and the column", err)
	}
}

// TestPlanIsPure: planning the same batch against the same snapshot twice
// gives the same plan and leaves the snapshot as it was.
func TestPlanIsPure(t *testing.T) {
	recs := []*kgo.Record{ptRec("t", 0, "", `{"id":"a","n":1}`), ptRec("t", 1, "", `{"id":"b","color":"x"}`), ptRec("x", 2, "", `{"id":"c"}`)}
	cfg := WriterConfig{TableNameFormat: "${topic}", AutoEvolve: true}
	p1, cat, err := ptPlan(t, cfg, nil, map[string]string{"t": "fresh"}, recs, true)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := NewWriter(WriterConfig{Connector: "plan", AutoEvolve: true})
	c, _ := w.records.Convert(context.Background(), recs)
	p2, err := w.plan(context.Background(), cat, c, true)
	if err != nil {
		t.Fatal(err)
	}
	if d1, d2 := describe(p1), describe(p2); d1 != d2 || d1 != "t: ins(id=a,n=1); read x; evolve t +color text" {
		t.Fatalf("plans %q and %q", d1, d2)
	}
	if len(cat.entries) != 1 || !cat.entries["t"].fresh || cat.entries["t"].changed {
		t.Errorf("the snapshot changed: %+v", cat.entries)
	}
}
