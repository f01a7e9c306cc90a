package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/dbztest"
)

// The block planner without a server: tables are described by hand and
// given to the planner as a snapshot.

// blockText renders blocks: per block its table, columns and rows.
func blockText(bs []*block) string {
	var out []string
	for _, b := range bs {
		names := make([]string, len(b.Cols))
		for i, c := range b.Cols {
			names[i] = c.Name
		}
		rows := make([]string, len(b.Rows))
		for i, r := range b.Rows {
			rows[i] = fmt.Sprintf("@%d%v", b.Offsets[i], r)
		}
		out = append(out, b.T.Name+"("+strings.Join(names, ",")+"): "+strings.Join(rows, " "))
	}
	return strings.Join(out, "\n")
}

// planTable describes table name with columns "name Type" (a trailing
// " DEFAULT" marks a column with a default).
func planTable(t *testing.T, name string, cols ...string) *table {
	tb := &table{DB: "d", Name: name, Ident: "`d`.`" + name + "`"}
	for _, c := range cols {
		def := strings.HasSuffix(c, " DEFAULT")
		c = strings.TrimSuffix(c, " DEFAULT")
		n, typ, _ := strings.Cut(c, " ")
		ct, err := parseType(typ)
		if err != nil {
			t.Fatal(err)
		}
		tb.add(&column{Name: n, Type: ct, HasDefault: def, Insertable: true})
	}
	return tb
}

// describePlan renders a row plan: its blocks (of 2 rows), refused
// records, tables to read, create and alter.
func describePlan(p *rowPlan) string {
	var parts []string
	if bs := blockText(blocks(p.groups, 2)); bs != "" {
		parts = append(parts, strings.ReplaceAll(bs, "\n", "; "))
	}
	for _, b := range p.bad {
		parts = append(parts, fmt.Sprintf("bad @%d %s: %v", b.Offset, b.Field, planCause(b)))
	}
	for _, r := range p.reads {
		parts = append(parts, "read "+r)
	}
	for _, c := range p.creates {
		parts = append(parts, "create "+c.ddl)
	}
	for _, e := range p.evolves {
		var cols []string
		for _, c := range e.cols {
			cols = append(cols, c[0]+" "+c[1])
		}
		parts = append(parts, "evolve "+e.t.Name+" +"+strings.Join(cols, " +"))
	}
	return strings.Join(parts, "; ")
}

// planKinds names the kinds of bad records the cases meet (each error
// wraps one of them).
var planKinds = map[error]string{
	record.ErrUnknownField: "unknown field", record.ErrCoerce: "coerce", record.ErrTombstone: "tombstone",
	record.ErrDecode: "decode", record.ErrTruncate: "truncate",
}

func planCause(err error) string {
	for k, name := range planKinds {
		if errors.Is(err, k) {
			return name
		}
	}
	return err.Error()
}

func TestPlanRows(t *testing.T) {
	events := planTable(t, "ev", "id String", "n Nullable(Int32)", "note String DEFAULT", "v UInt64", "is_deleted UInt8")
	create := func(name string, rec *record.Record) (string, error) {
		if rec.Value.Kind() != record.KindStruct {
			return "", record.Errorf(record.ErrDecode, "auto.create: value must be a struct")
		}
		return "CREATE TABLE " + name, nil
	}
	type state struct {
		t              *table
		fresh, evolved bool
	}
	rec := func(offset int64, key, value string) *kgo.Record {
		r := &kgo.Record{Topic: "ev", Offset: offset}
		if key != "" {
			r.Key = []byte(key)
		}
		if value != "" {
			r.Value = []byte(value)
		}
		return r
	}
	cases := []struct {
		name    string
		m       mapping
		cdc     map[string]string
		snap    map[string]state // nil table: known not to exist
		recs    []*kgo.Record
		want    string
		wantErr error
	}{
		{
			name: "rows in offset order, grouped by the DEFAULT columns they set, cut into blocks",
			m:    mapping{VersionColumn: "v"}, snap: map[string]state{"ev": {t: events, fresh: true}},
			recs: []*kgo.Record{rec(0, "", `{"id":"a","n":1}`), rec(1, "", `{"id":"b","note":"x"}`), rec(2, "", `{"id":"c","n":"3"}`), rec(3, "", `{"id":"d"}`)},
			want: "ev(id,n,v,is_deleted): @0[a 1 0 0] @2[c 3 2 0]; ev(id,n,v,is_deleted): @3[d <nil> 3 0]; ev(id,n,note,v,is_deleted): @1[b <nil> x 1 0]",
		},
		{
			name: "a value a column cannot hold is refused, naming the field",
			m:    mapping{VersionColumn: "v"}, snap: map[string]state{"ev": {t: events, fresh: true}},
			recs: []*kgo.Record{rec(0, "", `{"id":"a","n":"x"}`), rec(1, "", `{"id":"b"}`)},
			want: "ev(id,n,v,is_deleted): @1[b <nil> 1 0]; bad @0 n: coerce",
		},
		{
			name: "tombstones: deletion rows with delete.enabled, refused without",
			m:    mapping{VersionColumn: "v", DeletedColumn: "is_deleted", DeleteEnabled: true, KeyFields: []string{"id"}},
			snap: map[string]state{"ev": {t: events, fresh: true}},
			recs: []*kgo.Record{rec(0, `"a"`, `{"id":"a"}`), rec(1, `"a"`, "")},
			want: "ev(id,n,v,is_deleted): @0[a <nil> 0 0] @1[a <nil> 1 1]",
		},
		{
			name: "a tombstone without delete.enabled",
			m:    mapping{VersionColumn: "v"}, snap: map[string]state{"ev": {t: events, fresh: true}},
			recs: []*kgo.Record{rec(0, `"a"`, "")},
			want: "bad @0 : tombstone",
		},
		{
			name: "a table the snapshot lacks is read",
			recs: []*kgo.Record{rec(0, "", `{"id":"a"}`), rec(1, "", `{"id":"b"}`)},
			want: "read ev",
		},
		{
			name: "a cached table lacking a field is read again, not altered",
			m:    mapping{AutoEvolve: true}, snap: map[string]state{"ev": {t: events}},
			recs: []*kgo.Record{rec(0, "", `{"id":"a","color":"red"}`)},
			want: "read ev",
		},
		{
			name: "unknown field without auto.evolve",
			m:    mapping{VersionColumn: "v"}, snap: map[string]state{"ev": {t: events, fresh: true}},
			recs: []*kgo.Record{rec(0, "", `{"id":"a","color":"red"}`)},
			want: "bad @0 color: unknown field",
		},
		{
			name: "unknown fields with auto.evolve: one change with every new column",
			m:    mapping{VersionColumn: "v", AutoEvolve: true}, snap: map[string]state{"ev": {t: events, fresh: true}},
			recs: []*kgo.Record{rec(0, "", `{"id":"a"}`), rec(1, "", `{"id":"b","color":"red"}`), rec(2, "", `{"id":"c","size":3,"color":"x"}`)},
			want: "ev(id,n,v,is_deleted): @0[a <nil> 0 0]; evolve ev +color Nullable(String) DEFAULT NULL +size Nullable(Int64) DEFAULT NULL",
		},
		{
			name: "a table altered in this build that still lacks a field: the record is refused",
			m:    mapping{VersionColumn: "v", AutoEvolve: true}, snap: map[string]state{"ev": {t: events, fresh: true, evolved: true}},
			recs: []*kgo.Record{rec(0, "", `{"id":"a","color":"red"}`)},
			want: "bad @0 color: unknown field",
		},
		{
			name: "auto.create from the first record with a value; a delete before it writes nothing",
			m:    mapping{DeleteEnabled: true, KeyFields: []string{"id"}, Create: create}, snap: map[string]state{"ev": {fresh: true}},
			recs: []*kgo.Record{rec(0, `"a"`, ""), rec(1, "", `{"id":"b"}`), rec(2, "", `{"id":"c"}`)},
			want: "create CREATE TABLE ev",
		},
		{
			name: "auto.create: a record it cannot create the table from is refused, the next creates it",
			m:    mapping{Create: create}, snap: map[string]state{"ev": {fresh: true}},
			recs: []*kgo.Record{rec(0, "", `[1]`), rec(1, "", `{"id":"b"}`)},
			want: "bad @0 : decode; create CREATE TABLE ev",
		},
		{
			name: "a missing table without auto.create", snap: map[string]state{"ev": {fresh: true}},
			recs:    []*kgo.Record{rec(0, "", `{"id":"a"}`)},
			wantErr: ErrTableNotFound,
		},
		{
			name: "a truncate event is refused",
			m:    mapping{VersionColumn: "v", Format: "${source.table}"}, cdc: map[string]string{convert.KeyCDCTruncate: "apply"},
			snap: map[string]state{"items": {t: planTable(t, "items", "id Int32", "v UInt64"), fresh: true}},
			recs: func() []*kgo.Record {
				tbl := &dbztest.Table{Server: "src", DB: "shop", Schema: "public", Name: "items", Columns: []dbztest.Column{{Name: "id", Type: "int32"}}, Key: []string{"id"}}
				k, v := tbl.JSON(dbztest.Event{Op: 't', LSN: 5})
				return []*kgo.Record{{Topic: tbl.Topic(), Offset: 4, Key: k, Value: v}}
			}(),
			want: "bad @4 : truncate",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pipe := convert.DefaultPipeline()
			if tc.cdc != nil {
				var err error
				if pipe, err = convert.PipelineFromSettings(tc.cdc); err != nil {
					t.Fatal(err)
				}
			}
			snap := &snapshot{tables: map[string]*snapTable{}}
			for name, st := range tc.snap {
				snap.tables[name] = &snapTable{t: st.t, fresh: st.fresh, evolved: st.evolved}
			}
			ctx := context.Background()
			c, err := connectors.NewRecordPipeline(pipe, "all", tc.m.DeleteEnabled).Convert(ctx, tc.recs)
			if err != nil {
				t.Fatal(err)
			}
			p, err := mapRecords(ctx, tc.m, snap, c)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			for _, l := range c.DeadLetters() {
				p.bad = append(p.bad, l.Err)
			}
			if got := describePlan(p); got != tc.want {
				t.Errorf("plan\n got %s\nwant %s", got, tc.want)
			}
			if p.complete() != (len(p.reads)+len(p.creates)+len(p.evolves) == 0) {
				t.Error("complete disagrees with the plan's needs")
			}
		})
	}
}
