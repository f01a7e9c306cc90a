package integration

// Schema evolution as a real registry allows it: each compatibility level
// (BACKWARD, FORWARD, FULL, NONE) against five Avro evolutions, the
// registry's answer to each (registered, or refused with 409), and what
// txsink writes for the records of every evolution the registry accepted.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/txsink/txsink/integration/harness"
)

// compatV1 is the first version of every subject of the matrix.
const compatV1 = `{"type":"record","name":"Row","namespace":"compat","fields":[
 {"name":"id","type":"string"},
 {"name":"seq","type":"long"},
 {"name":"n","type":"int"},
 {"name":"s","type":"string","default":"dflt"}]}`

// compatEvolution is a second version of compatV1 and the levels under
// which Avro's schema resolution rules make it compatible (what
// Confluent documents for each level: BACKWARD, the new schema reads data
// of the old; FORWARD, the old reads data of the new; FULL, both).
type compatEvolution struct {
	name   string
	schema string
	ok     map[sr.CompatibilityLevel]bool
}

var compatEvolutions = []compatEvolution{
	{"add optional field", `{"type":"record","name":"Row","namespace":"compat","fields":[
 {"name":"id","type":"string"},{"name":"seq","type":"long"},{"name":"n","type":"int"},
 {"name":"s","type":"string","default":"dflt"},
 {"name":"note","type":["null","string"],"default":null}]}`,
		map[sr.CompatibilityLevel]bool{sr.CompatBackward: true, sr.CompatForward: true, sr.CompatFull: true, sr.CompatNone: true}},
	{"add field without default", `{"type":"record","name":"Row","namespace":"compat","fields":[
 {"name":"id","type":"string"},{"name":"seq","type":"long"},{"name":"n","type":"int"},
 {"name":"s","type":"string","default":"dflt"},
 {"name":"extra","type":"long"}]}`,
		map[sr.CompatibilityLevel]bool{sr.CompatForward: true, sr.CompatNone: true}},
	{"drop field with default", `{"type":"record","name":"Row","namespace":"compat","fields":[
 {"name":"id","type":"string"},{"name":"seq","type":"long"},{"name":"n","type":"int"}]}`,
		map[sr.CompatibilityLevel]bool{sr.CompatBackward: true, sr.CompatForward: true, sr.CompatFull: true, sr.CompatNone: true}},
	{"drop field without default", `{"type":"record","name":"Row","namespace":"compat","fields":[
 {"name":"id","type":"string"},{"name":"seq","type":"long"},
 {"name":"s","type":"string","default":"dflt"}]}`,
		map[sr.CompatibilityLevel]bool{sr.CompatBackward: true, sr.CompatNone: true}},
	{"widen int to long", `{"type":"record","name":"Row","namespace":"compat","fields":[
 {"name":"id","type":"string"},{"name":"seq","type":"long"},{"name":"n","type":"long"},
 {"name":"s","type":"string","default":"dflt"}]}`,
		map[sr.CompatibilityLevel]bool{sr.CompatBackward: true, sr.CompatNone: true}},
}

var compatLevels = []sr.CompatibilityLevel{sr.CompatBackward, sr.CompatForward, sr.CompatFull, sr.CompatNone}

// TestRegistryCompatibilityModes: for each level and evolution, a subject
// of its own gets compatV1, the level, then the evolution: the registry
// must register it where the level allows it and refuse it (409, "not
// compatible") where not, which only a real registry checks (srfake skips
// the test). Then one topic receives records of compatV1 and of every
// accepted (level, evolution) version, in turn, and a PostgreSQL connector
// with the Avro converter drains it into a table with every field's
// column: each row holds its version's fields (an added field its value, a
// dropped one NULL, a widened int its value), the table exact.
func TestRegistryCompatibilityModes(t *testing.T) {
	reg := harness.SchemaRegistry(t)
	if !reg.Real {
		t.Skipf("the registry is %s, which checks no compatibility: needs a real registry (TXSINK_TEST_SCHEMA_REGISTRY_BIN or _URL)", reg.Kind)
	}
	t.Logf("schema registry: %s", reg.Kind)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	type version struct {
		name   string
		id     int
		schema *avro.Schema
		fields map[string]bool
	}
	parse := func(text string) (*avro.Schema, map[string]bool) {
		s, err := avro.Parse(text)
		if err != nil {
			t.Fatal(err)
		}
		fields := map[string]bool{}
		for _, f := range []string{"n", "s", "note", "extra"} {
			if strings.Contains(text, `"name":"`+f+`"`) {
				fields[f] = true
			}
		}
		return s, fields
	}
	s1, f1 := parse(compatV1)
	var versions []version
	var answers []string
	for _, level := range compatLevels {
		for _, ev := range compatEvolutions {
			subject := reg.Subject("compat-" + strings.ToLower(level.String()) + "-" + strings.ReplaceAll(ev.name, " ", "-"))
			id1 := reg.Register(t, subject, sr.Schema{Schema: compatV1, Type: sr.TypeAvro})
			if len(versions) == 0 {
				versions = append(versions, version{"v1", id1, s1, f1})
			}
			for _, r := range reg.Client.SetCompatibility(ctx, sr.SetCompatibility{Level: level}, subject) {
				if r.Err != nil {
					t.Fatalf("set %s to %s: %v", subject, level, r.Err)
				}
			}
			ss, err := reg.Client.CreateSchema(ctx, subject, sr.Schema{Schema: ev.schema, Type: sr.TypeAvro})
			var re *sr.ResponseError
			refused := errors.As(err, &re) && re.StatusCode == http.StatusConflict
			if err != nil && !refused {
				t.Fatalf("%s, %s: %v", level, ev.name, err)
			}
			answer := "registered"
			if refused {
				answer = "refused (409: " + re.Message + ")"
			}
			answers = append(answers, fmt.Sprintf("%s/%s: %s", level, ev.name, answer))
			if refused == ev.ok[level] {
				t.Errorf("%s, %s: the registry %s it, want %s", level, ev.name, answer, map[bool]string{true: "registered", false: "refused"}[ev.ok[level]])
			}
			if !refused {
				s, f := parse(ev.schema)
				versions = append(versions, version{level.String() + "/" + ev.name, ss.ID, s, f})
			}
		}
	}
	t.Logf("the registry's answers:\n  %s", strings.Join(answers, "\n  "))
	if t.Failed() {
		return
	}

	// The records of every registered version, in turn, into one table.
	k := harness.Kafka(t)
	topic := formatTopic(t, k, "compat", 2)
	valueOf := func(seq int, id string) (version, map[string]any) {
		v := versions[seq%len(versions)]
		m := map[string]any{"id": id, "seq": int64(seq)}
		if v.fields["n"] {
			if strings.Contains(v.name, "widen") {
				m["n"] = int64(seq) << 33 // needs the long
			} else {
				m["n"] = int32(seq)
			}
		}
		if v.fields["s"] {
			m["s"] = fmt.Sprintf("s%d", seq)
		}
		if v.fields["note"] {
			m["note"] = fmt.Sprintf("note%d", seq)
		}
		if v.fields["extra"] {
			m["extra"] = int64(-seq)
		}
		return v, m
	}
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 40 * len(versions), Partitions: 2, AbortRatio: 0.15, MaxTxn: 20, Seed: 3030,
		Value: func(seq int, id string) []byte {
			v, m := valueOf(seq, id)
			b, err := sr.Encode(m, &sr.ConfluentHeader{}, v.id, nil, func(x any) ([]byte, error) { return v.schema.Encode(x) })
			if err != nil {
				panic(fmt.Sprintf("%s: encode seq %d: %v", v.name, seq, err))
			}
			return b
		}}, &u)

	pg := harness.Postgres(t)
	db := pg.NewDatabase(t)
	pool := connectPool(t, db)
	table := pgx.Identifier{topic}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+` (id text NOT NULL, seq bigint, n bigint, s text, note text, extra bigint,
 __connect_topic text, __connect_partition int, __connect_offset bigint, rn bigserial)`); err != nil {
		t.Fatal(err)
	}
	name := topic + "-pg"
	cfg := baseConnector(name, topic, db, "exactly_once")
	cfg["value.converter"] = "io.confluent.connect.avro.AvroConverter"
	cfg["value.converter.schema.registry.url"] = reg.URL
	p := startTxsink(t, k.Bootstrap, writeConnector(t, cfg), "w-"+name)
	waitDrained(t, pool, name, &u, 3*time.Minute, procAlive(p))
	stopTxsink(t, p)
	if problems := exactness(&u, readRows(t, pool, topic), anyOrder); len(problems) > 0 {
		t.Fatalf("%d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
	}

	rows, err := pool.Query(ctx, "SELECT id, seq, n, s, note, extra FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	var problems []string
	for rows.Next() {
		var id string
		var seq int64
		var nv, extra *int64
		var s, note *string
		if err := rows.Scan(&id, &seq, &nv, &s, &note, &extra); err != nil {
			t.Fatal(err)
		}
		n++
		v, m := valueOf(int(seq), id)
		got := fmt.Sprintf("%v, %v, %v, %v", deref(nv), deref(s), deref(note), deref(extra))
		want := fmt.Sprintf("%v, %v, %v, %v", num(m["n"]), m["s"], m["note"], m["extra"])
		if got != want {
			problems = append(problems, fmt.Sprintf("%s (%s): n, s, note, extra = %s, want %s", id, v.name, got, want))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Fatalf("%d of %d rows differ, first: %s", len(problems), n, strings.Join(problems[:min(5, len(problems))], "; "))
	}
	t.Logf("%d rows of %d schema versions (v1 and %d accepted evolutions), each with its version's fields", n, len(versions), len(versions)-1)
}

// num returns an Avro int or long as int64 (nil stays nil).
func num(v any) any {
	switch x := v.(type) {
	case int32:
		return int64(x)
	case int64:
		return x
	}
	return v
}
