package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/internal/pgtest"
)

const topic = "events"

// upRec is a record the test producer wrote.
type upRec struct {
	part int32
	off  int64
	id   string
	v    int
}

// fixture is a kfake topic with committed and aborted transactions, the
// producer's log of them, and a PostgreSQL database.
type fixture struct {
	bootstrap []string
	committed []upRec
	aborted   []upRec
	log       []Txn
	ends      map[int32]int64 // one past the last committed record
	db        string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	f := &fixture{bootstrap: c.ListenAddrs(), ends: map[int32]int64{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.bootstrap...), kgo.TransactionalID("up"),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seq := 0
	for txn := range 12 {
		abort := txn%4 == 3
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		var ups []upRec
		for i := range 5 {
			seq++
			u := upRec{part: int32((txn + i) % 2), id: fmt.Sprintf("id-%d", seq), v: seq * 10}
			v, _ := json.Marshal(map[string]any{"id": u.id, "v": u.v})
			recs = append(recs, &kgo.Record{Partition: u.part, Value: v})
			ups = append(ups, u)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			t.Fatal(err)
		}
		lt := Txn{ID: fmt.Sprintf("up-%d", txn), Outcome: OutcomeAcknowledged}
		if abort {
			lt.Outcome = OutcomeFailed
		}
		for i, r := range recs {
			ups[i].off = r.Offset
			lt.Records = append(lt.Records, TxnEntry{Topic: topic, Partition: r.Partition, Offset: r.Offset, ID: ups[i].id})
			if abort {
				f.aborted = append(f.aborted, ups[i])
			} else {
				f.committed = append(f.committed, ups[i])
				f.ends[r.Partition] = r.Offset + 1
			}
		}
		f.log = append(f.log, lt)
	}
	f.db = pgtest.Start(t).NewDatabase(t)
	return f
}

func (f *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// exactSink creates table <name>_events holding exactly the committed
// records and the offsets rows of connector name.
func (f *fixture) exactSink(t *testing.T, name string) {
	t.Helper()
	table := pgx.Identifier{name + "_" + topic}.Sanitize()
	f.exec(t, `CREATE TABLE IF NOT EXISTS txsink_offsets (connector text NOT NULL, topic text NOT NULL, partition integer NOT NULL,
		next_offset bigint, fence bigint NOT NULL DEFAULT 0, updated_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (connector, topic, partition))`)
	f.exec(t, `CREATE TABLE `+table+` (id text, v bigint, __connect_topic text, __connect_partition int, __connect_offset bigint)`)
	for _, r := range f.committed {
		f.exec(t, `INSERT INTO `+table+` VALUES ($1, $2, $3, $4, $5)`, r.id, r.v, topic, r.part, r.off)
	}
	for p, end := range f.ends {
		f.exec(t, `INSERT INTO txsink_offsets (connector, topic, partition, next_offset, fence) VALUES ($1, $2, $3, $4, 7)`, name, topic, p, end)
	}
}

func (f *fixture) config(name string) Config {
	return Config{
		Bootstrap: f.bootstrap,
		Topics:    []string{topic},
		Sink: SinkOptions{
			URL: f.db, Connector: name, Table: name + "_${topic}",
			IDColumn: "id", CompareColumns: []string{"v"},
		},
		IDField:       "id",
		PreparedGrace: -1,
		ScanIdle:      2 * time.Second,
	}
}

func check(t *testing.T, c Config) *Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Check(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", text.String())
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON report does not parse back: %v", err)
	}
	if back.SinkFaults != r.SinkFaults || len(back.Partitions) != len(r.Partitions) {
		t.Fatalf("JSON round trip: %d faults / %d partitions, want %d / %d", back.SinkFaults, len(back.Partitions), r.SinkFaults, len(r.Partitions))
	}
	return r
}

// want asserts the report's counts equal want exactly (kinds not named must
// be zero).
func want(t *testing.T, r *Report, want map[Kind]int) {
	t.Helper()
	for _, k := range append(append([]Kind{}, SinkKinds...), UpstreamKinds...) {
		if r.Counts[k] != want[k] {
			t.Errorf("%s: got %d, want %d", k, r.Counts[k], want[k])
		}
	}
	faults := 0
	for k, n := range want {
		if k.IsSinkFault() {
			faults += n
		}
	}
	if r.OK() != (faults == 0) {
		t.Errorf("OK() = %v with %d sink faults", r.OK(), r.SinkFaults)
	}
}

func TestCheck(t *testing.T) {
	f := newFixture(t)
	if len(f.committed) == 0 || len(f.aborted) == 0 {
		t.Fatal("fixture has no committed or no aborted records")
	}
	firstOn := func(p int32) upRec {
		for _, r := range f.committed {
			if r.part == p {
				return r
			}
		}
		t.Fatal("no committed record")
		return upRec{}
	}
	lastOn := func(p int32) upRec {
		var out upRec
		for _, r := range f.committed {
			if r.part == p {
				out = r
			}
		}
		return out
	}
	cases := []struct {
		name   string
		mutate func(t *testing.T, table string, c *Config)
		want   map[Kind]int
		lag    int64
	}{
		{name: "clean", mutate: func(*testing.T, string, *Config) {}},
		{name: "clean_with_producer_log", mutate: func(_ *testing.T, _ string, c *Config) { c.ProducerLog = f.log }},
		{name: "loss", want: map[Kind]int{Loss: 1}, mutate: func(t *testing.T, table string, _ *Config) {
			f.exec(t, `DELETE FROM `+table+` WHERE id = $1`, f.committed[3].id)
		}},
		{name: "duplicate", want: map[Kind]int{Duplicate: 1}, mutate: func(t *testing.T, table string, _ *Config) {
			r := f.committed[4]
			f.exec(t, `INSERT INTO `+table+` VALUES ($1, $2, $3, $4, $5)`, r.id, r.v, topic, r.part, r.off)
		}},
		{name: "duplicate_id", want: map[Kind]int{DuplicateID: 1, ValueMismatch: 1}, mutate: func(t *testing.T, table string, _ *Config) {
			// B's row carries A's payload: A is in two rows, B in none.
			a, b := f.committed[0], f.committed[1]
			f.exec(t, `UPDATE `+table+` SET id = $1, v = $2 WHERE id = $3`, a.id, a.v, b.id)
		}},
		{name: "aborted_read", want: map[Kind]int{AbortedRead: 1}, mutate: func(t *testing.T, table string, c *Config) {
			r := f.aborted[0]
			f.exec(t, `INSERT INTO `+table+` VALUES ($1, $2, $3, $4, $5)`, r.id, r.v, topic, r.part, r.off)
			c.ProducerLog = f.log
		}},
		{name: "aborted_read_marker", want: map[Kind]int{AbortedRead: 1}, mutate: func(t *testing.T, table string, _ *Config) {
			// One past the last record of partition 0 is its commit marker.
			r := lastOn(0)
			f.exec(t, `INSERT INTO `+table+` VALUES ($1, $2, $3, $4, $5)`, "ghost", 0, topic, 0, r.off+1)
		}},
		{name: "value_mismatch", want: map[Kind]int{ValueMismatch: 1}, mutate: func(t *testing.T, table string, _ *Config) {
			f.exec(t, `UPDATE `+table+` SET v = v + 1 WHERE id = $1`, f.committed[5].id)
		}},
		{name: "beyond_offset", want: map[Kind]int{BeyondOffset: 1}, lag: 1, mutate: func(t *testing.T, _ string, c *Config) {
			r := lastOn(1)
			f.exec(t, `UPDATE txsink_offsets SET next_offset = $1 WHERE connector = $2 AND partition = 1`, r.off, c.Sink.Connector)
		}},
		{name: "lag", want: map[Kind]int{LagExceeded: 1}, lag: 1, mutate: func(t *testing.T, table string, c *Config) {
			r := lastOn(1)
			f.exec(t, `DELETE FROM `+table+` WHERE id = $1`, r.id)
			f.exec(t, `UPDATE txsink_offsets SET next_offset = $1 WHERE connector = $2 AND partition = 1`, r.off, c.Sink.Connector)
			c.CheckLag = true
		}},
		{name: "offset_ahead", want: map[Kind]int{OffsetAhead: 1}, mutate: func(t *testing.T, _ string, c *Config) {
			f.exec(t, `UPDATE txsink_offsets SET next_offset = next_offset + 100 WHERE connector = $1 AND partition = 0`, c.Sink.Connector)
		}},
		{name: "offset_backwards", want: map[Kind]int{OffsetBackwards: 1}, mutate: func(_ *testing.T, _ string, c *Config) {
			now := time.Now()
			c.History = []OffsetSample{
				{At: now.Add(-3 * time.Second), Topic: topic, Partition: 0, Next: firstOn(0).off + 1, Fence: 5},
				{At: now.Add(-2 * time.Second), Topic: topic, Partition: 0, Next: f.ends[0], Fence: 5},
				{At: now.Add(-1 * time.Second), Topic: topic, Partition: 0, Next: firstOn(0).off + 1, Fence: 6},
			}
		}},
		{name: "prepared_leftover", want: map[Kind]int{PreparedLeft: 1}, mutate: func(t *testing.T, table string, c *Config) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, f.db)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			for _, sql := range []string{"BEGIN", `INSERT INTO ` + table + ` VALUES ('x', 0, 'other', 0, 0)`,
				"PREPARE TRANSACTION '" + GIDPrefix(c.Sink.Connector) + "0123456789abcdef_0_1_2'"} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { f.exec(t, "ROLLBACK PREPARED '"+GIDPrefix(c.Sink.Connector)+"0123456789abcdef_0_1_2'") })
		}},
		{name: "upstream", want: map[Kind]int{UpstreamLost: 2, UpstreamAbortedVisible: 1, UpstreamLostSunk: 1}, mutate: func(t *testing.T, table string, c *Config) {
			// The producer log claims: an aborted record was acknowledged
			// (so the broker "lost" it; the sink even holds it), another
			// was acknowledged at an offset the log does not have, and a
			// committed transaction failed.
			log := append([]Txn(nil), f.log...)
			lost, lostSunk, visible := f.aborted[0], f.aborted[1], f.committed[2]
			log = append(log,
				Txn{ID: "claimed-1", Outcome: OutcomeAcknowledged, Records: []TxnEntry{{Topic: topic, Partition: lost.part, Offset: lost.off, ID: lost.id}}},
				Txn{ID: "claimed-2", Outcome: OutcomeAcknowledged, Records: []TxnEntry{{Topic: topic, Partition: lostSunk.part, Offset: lostSunk.off, ID: lostSunk.id}}},
				Txn{ID: "claimed-3", Outcome: OutcomeFailed, Records: []TxnEntry{{Topic: topic, Partition: visible.part, Offset: visible.off, ID: visible.id}}},
				Txn{ID: "unknown-1", Outcome: OutcomeUnknown, Records: []TxnEntry{{Topic: topic, Partition: visible.part, Offset: visible.off, ID: visible.id}}},
				Txn{ID: "unknown-2", Outcome: OutcomeUnknown, Records: []TxnEntry{{Topic: topic, Partition: lost.part, Offset: lost.off, ID: lost.id}}},
			)
			// Drop the generated lines of the doctored records.
			var clean []Txn
			for _, tx := range log {
				keep := Txn{ID: tx.ID, Outcome: tx.Outcome}
				for _, e := range tx.Records {
					if strings.HasPrefix(tx.ID, "up-") && (e.ID == lost.id || e.ID == lostSunk.id || e.ID == visible.id) {
						continue
					}
					keep.Records = append(keep.Records, e)
				}
				clean = append(clean, keep)
			}
			c.ProducerLog = clean
			f.exec(t, `INSERT INTO `+table+` VALUES ($1, $2, $3, $4, $5)`, lostSunk.id, lostSunk.v, topic, lostSunk.part, lostSunk.off)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "c_" + tc.name
			f.exactSink(t, name)
			c := f.config(name)
			tc.mutate(t, pgx.Identifier{name + "_" + topic}.Sanitize(), &c)
			r := check(t, c)
			want(t, r, tc.want)
			if r.Lag != tc.lag {
				t.Errorf("lag %d, want %d", r.Lag, tc.lag)
			}
			if r.Committed != len(f.committed) {
				t.Errorf("committed records %d, want %d", r.Committed, len(f.committed))
			}
			if tc.name == "upstream" {
				u := r.Upstream
				if u == nil || u.UnknownCommitted != 1 || u.UnknownAborted != 1 {
					t.Errorf("upstream summary %+v: want 1 unknown committed, 1 unknown aborted", u)
				}
			}
			if tc.name == "aborted_read" && !strings.Contains(fmt.Sprint(r.Examples), "failed (aborted) transaction up-3") {
				t.Errorf("aborted read not attributed to the failed transaction: %v", r.Examples)
			}
		})
	}
}

// TestPreparedGrace: a young prepared transaction is in flight, not a
// leftover.
func TestPreparedGrace(t *testing.T) {
	r := Analyze(Input{Connector: "c", PreparedGrace: time.Minute, Prepared: []Prepared{
		{GID: GIDPrefix("c") + "x_0_1_2", Age: time.Second, Ours: true},
		{GID: GIDPrefix("other") + "x_0_1_2", Age: time.Hour},
	}})
	if !r.OK() || len(r.Notes) != 2 {
		t.Fatalf("OK=%v notes=%v", r.OK(), r.Notes)
	}
}

func TestReadProducerLog(t *testing.T) {
	in := `{"txn":"a","outcome":"acknowledged","records":[{"topic":"t","partition":1,"offset":5,"id":"x"}]}

{"txn":"b","outcome":"unknown","records":[]}
`
	txns, err := ReadProducerLog(strings.NewReader(in))
	if err != nil || len(txns) != 2 || txns[0].Records[0].Offset != 5 {
		t.Fatalf("%v %+v", err, txns)
	}
	if _, err := ReadProducerLog(strings.NewReader(`{"txn":"a","outcome":"maybe"}`)); err == nil {
		t.Fatal("bad outcome accepted")
	}
}

func TestExtractor(t *testing.T) {
	x := Extractor{IDField: "meta.id", Fields: []string{"n", "s", "b", "o"}}
	r := x.extract(nil, []byte(`{"schema":{},"payload":{"meta":{"id":"q"},"n":1.50,"s":"x","b":true,"o":{"a":1}}}`))
	got := []string{r.ID}
	for _, f := range r.Fields {
		got = append(got, *f)
	}
	if strings.Join(got, "|") != `q|1.50|x|true|{"a":1}` {
		t.Fatalf("got %q", got)
	}
	if !sameValue("1.50", "1.5") || sameValue("1", "2") {
		t.Fatal("numeric comparison")
	}
	if k := (Extractor{IDField: "key"}).extract([]byte("k1"), nil); k.ID != "k1" {
		t.Fatalf("key id %q", k.ID)
	}
}

func FuzzReadProducerLog(f *testing.F) {
	f.Add([]byte(`{"txn":"a","outcome":"failed","records":[{"topic":"t","partition":0,"offset":1,"id":"x"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		txns, err := ReadProducerLog(bytes.NewReader(b))
		if err == nil {
			_ = Analyze(Input{ProducerLog: txns, Truth: []PartitionTruth{{Topic: "t", StableEnd: 10, Records: []Record{{Offset: 1, ID: "x"}}}}})
		}
	})
}
