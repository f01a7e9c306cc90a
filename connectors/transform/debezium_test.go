package transform_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/connectors/transform"
)

const unwrap = transform.ClassExtractNewRecordState

// A Debezium PostgreSQL change event's schema, as the JsonConverter
// writes it.
const dbzRow = `{"type":"struct","optional":true,"name":"dbserver1.inventory.customers.Value","fields":[
	{"field":"id","type":"int32"},{"field":"first_name","type":"string"},{"field":"email","type":"string","optional":true}]}`

var dbzEnvelopeSchema = `{"type":"struct","name":"dbserver1.inventory.customers.Envelope","version":2,"fields":[
	{"field":"before",` + strings.TrimPrefix(dbzRow, "{") + `,
	{"field":"after",` + strings.TrimPrefix(dbzRow, "{") + `,
	{"field":"source","type":"struct","name":"io.debezium.connector.postgresql.Source","fields":[
		{"field":"version","type":"string"},{"field":"connector","type":"string"},{"field":"name","type":"string"},
		{"field":"ts_ms","type":"int64"},{"field":"db","type":"string"},{"field":"schema","type":"string"},
		{"field":"table","type":"string"},{"field":"txId","type":"int64","optional":true},{"field":"lsn","type":"int64","optional":true}]},
	{"field":"transaction","type":"struct","optional":true,"fields":[
		{"field":"id","type":"string"},{"field":"total_order","type":"int64"},{"field":"data_collection_order","type":"int64"}]},
	{"field":"op","type":"string"},
	{"field":"ts_ms","type":"int64","optional":true}]}`

// dbzPayload is a change event's payload; before and after are JSON
// (or null); txn is the transaction block (or null).
func dbzPayload(op, before, after, txn string) string {
	return fmt.Sprintf(`{"before":%s,"after":%s,"source":{"version":"3.6.1.Final","connector":"postgresql","name":"dbserver1",
		"ts_ms":1700000000000,"db":"inventory","schema":"public","table":"customers","txId":571,"lsn":1234},
		"transaction":%s,"op":%q,"ts_ms":1700000000500}`, before, after, txn, op)
}

const (
	row1  = `{"id":1,"first_name":"Anne","email":"anne@example.com"}`
	row1b = `{"id":1,"first_name":"Anna","email":null}`
	txn   = `{"id":"571","total_order":42,"data_collection_order":7}`
)

// dbzEvent is a typed change event; dbzJSON the same without a schema.
func dbzEvent(t testing.TB, op, before, after string) record.Value {
	return typed(t, dbzEnvelopeSchema, dbzPayload(op, before, after, "null"))
}

func dbzJSON(t testing.TB, op, before, after string) record.Value {
	return schemaless(t, dbzPayload(op, before, after, "null"))
}

// both runs fn with the typed and the schemaless form of an event.
func both(t *testing.T, fn func(t *testing.T, event func(op, before, after string) record.Value)) {
	t.Run("typed", func(t *testing.T) {
		fn(t, func(op, before, after string) record.Value { return dbzEvent(t, op, before, after) })
	})
	t.Run("schemaless", func(t *testing.T) {
		fn(t, func(op, before, after string) record.Value { return dbzJSON(t, op, before, after) })
	})
}

func TestExtractNewRecordStateUnwrap(t *testing.T) {
	both(t, func(t *testing.T, event func(op, before, after string) record.Value) {
		c := one(t, unwrap)
		for _, op := range []string{"c", "r"} {
			r := rec(event(op, "null", row1))
			if !apply(t, c, r) {
				t.Fatalf("%s event dropped", op)
			}
			wantJSON(t, op+" event", r.Value, row1)
		}
		r := rec(event("u", row1, row1b))
		apply(t, c, r)
		wantJSON(t, "update", r.Value, row1b)
		if s := r.Value.Schema(); s != nil && (s.Name != "dbserver1.inventory.customers.Value" || s.Field("email") == nil) {
			t.Errorf("the row keeps its schema: got %s %s", s.Name, s)
		}
	})
}

func TestExtractNewRecordStateDeletes(t *testing.T) {
	type outcome struct {
		deleteKept, deleteNull, deleteSchemaless, tombstoneKept bool
		deleted                                                 string // __deleted of the delete ("" none)
	}
	for _, tc := range []struct {
		settings []string
		want     outcome
	}{
		// Debezium 3.2+'s default, delete.tombstone.handling.mode=tombstone.
		{nil, outcome{deleteKept: true, deleteNull: true}},
		{[]string{"delete.tombstone.handling.mode", "tombstone"}, outcome{deleteKept: true, deleteNull: true}},
		{[]string{"delete.tombstone.handling.mode", "drop"}, outcome{}},
		{[]string{"delete.tombstone.handling.mode", "rewrite"}, outcome{deleteKept: true, deleted: "true"}},
		{[]string{"delete.tombstone.handling.mode", "REWRITE-WITH-TOMBSTONE"}, outcome{deleteKept: true, deleted: "true", tombstoneKept: true}},
		{[]string{"delete.tombstone.handling.mode", "delete-to-tombstone"}, outcome{deleteKept: true, deleteNull: true, deleteSchemaless: true}},
		// Debezium up to 3.1: delete.handling.mode (default drop) and
		// drop.tombstones (default true).
		{[]string{"drop.tombstones", "false"}, outcome{tombstoneKept: true}},
		{[]string{"delete.handling.mode", "none"}, outcome{deleteKept: true, deleteNull: true}},
		{[]string{"delete.handling.mode", "none", "drop.tombstones", "false"}, outcome{deleteKept: true, deleteNull: true, tombstoneKept: true}},
		{[]string{"delete.handling.mode", "rewrite"}, outcome{deleteKept: true, deleted: "true"}},
		{[]string{"delete.handling.mode", "drop"}, outcome{}},
		// The new setting wins, as in Debezium 2.5 to 3.1.
		{[]string{"delete.tombstone.handling.mode", "drop", "delete.handling.mode", "none", "drop.tombstones", "false"}, outcome{}},
	} {
		name := strings.Join(tc.settings, "=")
		t.Run(name, func(t *testing.T) {
			both(t, func(t *testing.T, event func(op, before, after string) record.Value) {
				c := one(t, unwrap, tc.settings...)
				del := rec(event("d", row1, "null"))
				keep := apply(t, c, del)
				if keep != tc.want.deleteKept {
					t.Fatalf("delete kept = %v, want %v", keep, tc.want.deleteKept)
				}
				if keep {
					if del.Value.IsNull() != tc.want.deleteNull {
						t.Errorf("delete became %s", del.Value.GoString())
					}
					if tc.want.deleteSchemaless && del.Value.Schema() != nil {
						t.Errorf("delete-to-tombstone kept a value schema %s", del.Value.Schema())
					}
					if tc.want.deleted != "" {
						wantJSON(t, "rewritten delete", del.Value, `{"id":1,"first_name":"Anne","email":"anne@example.com","__deleted":"`+tc.want.deleted+`"}`)
					}
				}
				tomb := rec(record.Value{})
				if keep := apply(t, c, tomb); keep != tc.want.tombstoneKept {
					t.Errorf("tombstone kept = %v, want %v", keep, tc.want.tombstoneKept)
				}
				// Creates get __deleted "false" in rewrite modes.
				cr := rec(event("c", "null", row1))
				apply(t, c, cr)
				d, has := cr.Value.Get("__deleted")
				if has != (tc.want.deleted != "") || has && js(t, d) != `"false"` {
					t.Errorf("create's __deleted = %s (present %v)", d.GoString(), has)
				}
			})
		})
	}
}

func TestExtractNewRecordStateTruncateAndUnknown(t *testing.T) {
	c := one(t, unwrap, "delete.tombstone.handling.mode", "rewrite", "add.headers", "op")
	// testTruncateDroppedByDefault.
	if apply(t, c, rec(dbzEvent(t, "t", "null", "null"))) {
		t.Error("truncate event kept")
	}
	if apply(t, c, rec(dbzJSON(t, "t", "null", "null"))) {
		t.Error("schemaless truncate event kept")
	}
	// testIgnoreUnknownRecord, testAddHeadersForNonEnvelopeRecord: a
	// heartbeat passes unchanged, without headers.
	hb := typed(t, `{"type":"struct","name":"io.debezium.connector.common.Heartbeat","fields":[{"field":"ts_ms","type":"int64"}]}`, `{"ts_ms":1}`)
	r := rec(hb)
	apply(t, c, r)
	if r.Value.Schema() != hb.Schema() || len(r.Headers) != 0 {
		t.Errorf("heartbeat changed: %s, headers %v", r.Value.GoString(), r.Headers)
	}
	for _, v := range []string{`{"ts_ms":1}`, `"text"`, `{"op":1,"after":{}}`} {
		r := rec(schemaless(t, v))
		apply(t, c, r)
		wantJSON(t, "non-envelope "+v, r.Value, v)
	}
	// The envelope's name alone is enough with a schema (Debezium's rule).
	named := typed(t, `{"type":"struct","name":"x.Envelope","fields":[{"field":"after","type":"struct","optional":true,"fields":[{"field":"a","type":"int32"}]}]}`, `{"after":{"a":1}}`)
	r = rec(named)
	apply(t, c, r)
	wantJSON(t, "named envelope", r.Value, `{"a":1,"__deleted":"false"}`)
}

func TestExtractNewRecordStateAddFields(t *testing.T) {
	t.Run("typed", func(t *testing.T) {
		c := one(t, unwrap, "add.fields", "op , table,lsn,source.ts_ms,ts_ms,id,db")
		r := rec(dbzEvent(t, "u", row1, row1b))
		apply(t, c, r)
		wantJSON(t, "value", r.Value, `{"id":1,"first_name":"Anna","email":null,"__op":"u","__table":"customers","__lsn":1234,"__source_ts_ms":1700000000000,"__ts_ms":1700000000500,"__id":null,"__db":"inventory"}`)
		wantSchema(t, "value", r.Value, "struct{id int32, first_name string, email optional string, __op optional string, __table optional string, __lsn optional int64, __source_ts_ms optional int64, __ts_ms optional int64, __id optional string, __db optional string}")
	})
	t.Run("transaction", func(t *testing.T) {
		// testAddFieldsSpecifyStruct, testNewFieldAndHeaderMapping.
		c := one(t, unwrap, "add.fields", "op:OP, lsn:LSN, id:ID, source.lsn:source_lsn, transaction.total_order:TOTAL_ORDER, notExisting, source.nope",
			"add.fields.prefix", "")
		r := rec(typed(t, dbzEnvelopeSchema, dbzPayload("u", row1, row1b, txn)))
		apply(t, c, r)
		wantJSON(t, "value", r.Value, `{"id":1,"first_name":"Anna","email":null,"OP":"u","LSN":1234,"ID":"571","source_lsn":1234,"TOTAL_ORDER":42}`)
		r = rec(schemaless(t, dbzPayload("u", row1, row1b, txn)))
		apply(t, c, r)
		wantJSON(t, "schemaless value", r.Value, `{"id":1,"first_name":"Anna","email":null,"OP":"u","LSN":1234,"ID":"571","source_lsn":1234,"TOTAL_ORDER":42}`)
	})
	t.Run("rewriteDelete", func(t *testing.T) {
		// testAddFieldsHandleDeleteRewrite.
		both(t, func(t *testing.T, event func(op, before, after string) record.Value) {
			c := one(t, unwrap, "delete.tombstone.handling.mode", "rewrite", "add.fields", "op,lsn")
			r := rec(event("d", row1, "null"))
			apply(t, c, r)
			wantJSON(t, "value", r.Value, `{"id":1,"first_name":"Anne","email":"anne@example.com","__deleted":"true","__op":"d","__lsn":1234}`)
		})
	})
	t.Run("collision", func(t *testing.T) {
		c := one(t, unwrap, "add.fields", "table:id", "add.fields.prefix", "")
		err := applyErr(t, c, rec(dbzEvent(t, "c", "null", row1)))
		contains(t, "error", err.Error(), `two fields named "id"`)
	})
}

func TestExtractNewRecordStateSchemaCache(t *testing.T) {
	c := one(t, unwrap, "add.fields", "op")
	s, err := convert.ParseConnectSchema([]byte(dbzEnvelopeSchema))
	if err != nil {
		t.Fatal(err)
	}
	event := func(op, before, after string) record.Value {
		v, err := convert.FromConnectJSON([]byte(dbzPayload(op, before, after, "null")), s, "")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	r1, r2 := rec(event("c", "null", row1)), rec(event("u", row1, row1b))
	apply(t, c, r1)
	apply(t, c, r2)
	if r1.Value.Schema() != r2.Value.Schema() {
		t.Error("two events of one schema got two derived schemas")
	}
}

func TestExtractNewRecordStateHeaders(t *testing.T) {
	both(t, func(t *testing.T, event func(op, before, after string) record.Value) {
		c := one(t, unwrap, "delete.tombstone.handling.mode", "rewrite-with-tombstone", "add.headers", "op,source.lsn,transaction.id:TXN_ID,nope", "add.headers.prefix", "prefix.")
		r := rec(event("d", row1, "null"))
		original := []kgo.RecordHeader{{Key: "application/test", Value: []byte("kept")}}
		r.Raw.Headers = original
		r.Headers = r.Raw.Headers
		apply(t, c, r)
		got := map[string]string{}
		for _, h := range r.Headers {
			got[h.Key] = string(h.Value)
		}
		want := map[string]string{"application/test": "kept", "prefix.op": "d", "prefix.source_lsn": "1234", "prefix.TXN_ID": ""}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("headers %v, want %v", got, want)
		}
		if len(r.Raw.Headers) != 1 {
			t.Error("the Kafka record's headers were changed")
		}
		// testAddHeadersHandleDeleteRewriteAndTombstone: a tombstone gets
		// the delete operation.
		tomb := rec(record.Value{})
		apply(t, c, tomb)
		if len(tomb.Headers) != 1 || tomb.Headers[0].Key != "prefix.op" || string(tomb.Headers[0].Value) != "d" {
			t.Errorf("tombstone headers %v", tomb.Headers)
		}
	})
}

func TestExtractNewRecordStateRouteByField(t *testing.T) {
	both(t, func(t *testing.T, event func(op, before, after string) record.Value) {
		c := one(t, unwrap, "route.by.field", "first_name", "delete.tombstone.handling.mode", "rewrite")
		r := rec(event("c", "null", row1))
		apply(t, c, r)
		if r.Topic != "Anne" {
			t.Errorf("create routed to %q", r.Topic)
		}
		r = rec(event("u", row1, row1b))
		apply(t, c, r)
		if r.Topic != "Anna" {
			t.Errorf("update routed to %q", r.Topic)
		}
		r = rec(event("d", row1b, "null"))
		apply(t, c, r)
		if r.Topic != "Anna" {
			t.Errorf("delete routed to %q", r.Topic)
		}
		// A null routing field keeps the topic.
		r = rec(event("c", "null", `{"id":2,"first_name":"B","email":null}`))
		apply(t, one(t, unwrap, "route.by.field", "email"), r)
		if r.Topic != "test" {
			t.Errorf("null routing field routed to %q", r.Topic)
		}
		err := applyErr(t, one(t, unwrap, "route.by.field", "nope"), rec(event("c", "null", row1)))
		if fieldOf(err) != "nope" {
			t.Errorf("error %v names %q", err, fieldOf(err))
		}
	})
}

// The unwrap and route pair of Debezium's tutorials: server.schema.table
// topics into tables named by the table.
func TestUnwrapAndRoute(t *testing.T) {
	c := chainOf(t, "transforms", "unwrap,route",
		"transforms.unwrap.type", unwrap, "transforms.unwrap.drop.tombstones", "false",
		"transforms.route.type", transform.ClassRegexRouter,
		"transforms.route.regex", `([^.]+)\.([^.]+)\.([^.]+)`, "transforms.route.replacement", "$3")
	r := rec(dbzEvent(t, "c", "null", row1))
	r.Topic = "dbserver1.inventory.customers"
	apply(t, c, r)
	if r.Topic != "customers" {
		t.Errorf("topic %q", r.Topic)
	}
	wantJSON(t, "value", r.Value, row1)
	// Legacy settings: the delete is dropped, its tombstone kept.
	if apply(t, c, rec(dbzEvent(t, "d", row1, "null"))) {
		t.Error("delete kept with delete.handling.mode's default (drop)")
	}
	tomb := rec(record.Value{})
	tomb.Topic = "dbserver1.inventory.customers"
	if !apply(t, c, tomb) || tomb.Topic != "customers" {
		t.Errorf("tombstone: topic %q", tomb.Topic)
	}
}

func TestExtractNewRecordStateConfig(t *testing.T) {
	checkConfigErrors(t, unwrap, []configCase{
		{[]string{"delete.tombstone.handling.mode", "keep"}, "transforms.x.delete.tombstone.handling.mode", "must be one of drop, tombstone"},
		{[]string{"delete.handling.mode", "keep"}, "transforms.x.delete.handling.mode", "must be one of none, drop, rewrite"},
		{[]string{"drop.tombstones", "yes"}, "transforms.x.drop.tombstones", "true or false"},
		{[]string{"add.fields", "source.ts.ms"}, "transforms.x.add.fields", "at most one dot"},
		{[]string{"add.headers", "op:"}, "transforms.x.add.headers", "invalid entry"},
		{[]string{"operation.header", "true"}, "transforms.x.operation.header", "use add.headers=op"},
		{[]string{"add.source.fields", "lsn"}, "transforms.x.add.source.fields", "use add.fields"},
		{[]string{"drop.fields.header.name", "h"}, "transforms.x.drop.fields.header.name", "not supported"},
		{[]string{"route.by.fields", "x"}, "transforms.x.route.by.fields", "unknown setting for ExtractNewRecordState"},
	})
	// Settings at their defaults are accepted.
	one(t, unwrap, "drop.fields.from.key", "false", "drop.fields.keep.schema.compatible", "true", "replace.null.with.default", "false", "drop.fields.header.name", "")
}
