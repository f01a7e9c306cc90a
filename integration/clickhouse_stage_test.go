package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	chsink "github.com/txsink/txsink/connectors/clickhouse"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/internal/dbztest"
	"github.com/txsink/txsink/twophase"
)

// TestClickHouseStageDeleteBeforeTableCommitted is the ClickHouse side of
// connectors/postgres TestStageDeleteBeforeTableCommitted. A round whose
// batch creates its table (auto.create) is prepared and not yet decided;
// the next round, written ahead meanwhile, holds only a delete of a row
// that batch inserted. ClickHouse's DDL is not transactional: the build
// of the first batch created the table, so the write-ahead sees it and
// keeps the delete (a row marked deleted, newer by its version), and
// after both commits the row is gone.
func TestClickHouseStageDeleteBeforeTableCommitted(t *testing.T) {
	k := harness.Kafka(t)
	ch := harness.ClickHouse(t)
	db := ch.NewDatabase(t)
	conn := ch.Conn(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	connector := fmt.Sprintf("stdel-%08x", rand.Uint32())
	topic := fmt.Sprintf("stdel_%08x", rand.Uint32())
	k.CreateTopic(t, topic, 1)
	items := &dbztest.Table{
		Server: "src", DB: "shop", Schema: "public", Name: "items",
		Columns: []dbztest.Column{{Name: "id", Type: "int32"}, {Name: "name", Type: "string"}},
		Key:     []string{"id"},
	}
	// The records exist upstream: a redo re-reads a batch from Kafka.
	var recs []*kgo.Record
	for _, e := range []*dbztest.Event{
		{Op: 'c', After: dbztest.Row{"id": 1, "name": "a"}, LSN: 10},
		{Op: 'c', After: dbztest.Row{"id": 2, "name": "b"}, LSN: 20},
		{Op: 'd', Before: dbztest.Row{"id": 2, "name": "b"}, LSN: 30},
		nil,
	} {
		r := &kgo.Record{Topic: topic, Partition: 0}
		if e != nil {
			r.Key, r.Value = items.JSON(*e)
		} else {
			r.Key = recs[len(recs)-1].Key
		}
		recs = append(recs, r)
	}
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	pipe, err := convert.PipelineFromSettings(map[string]string{convert.KeyCDCFormat: convert.CDCFormatDebezium})
	if err != nil {
		t.Fatal(err)
	}
	env := connectors.Env{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Bootstrap: []string{k.Bootstrap}, Pipeline: pipe}
	s, err := chsink.Open(ctx, env, chsink.Config{
		Connector: connector, Delivery: "exactly_once", Addr: []string{ch.Addr}, Database: db,
		User: ch.User, Password: ch.Password, DialTimeout: 5 * time.Second, TableNameFormat: "${topic}",
		OffsetsTable: "txsink_offsets", IntentsTable: "txsink_intents", BlockRows: 1000, Dedup: "auto",
		AutoCreate: true, VersionColumn: "_version", DeletedColumn: "is_deleted",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acq, err := s.Acquire(ctx, topic, []int32{0})
	if err != nil {
		t.Fatal(err)
	}
	fence := acq[0].Fence
	if err := s.Initialize(ctx, topic, 0, fence, 0); err != nil {
		t.Fatal(err)
	}
	batch := func(rs []*kgo.Record) *twophase.Batch {
		first, last := rs[0].Offset, rs[len(rs)-1].Offset
		return &twophase.Batch{ID: twophase.BatchID{Connector: connector, Topic: topic, Partition: 0, First: first, Last: last}, Prev: first, Fence: fence, Records: rs}
	}
	create := batch(recs[:2])
	create.Alone = true
	if err := s.Prepare(ctx, create); err != nil {
		t.Fatal(err)
	}
	del := batch(recs[2:])
	if err := s.Stage(ctx, del); err != nil {
		t.Logf("the delete was not written ahead: %v", err)
	}
	if err := s.Commit(ctx, create.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Prepare(ctx, del); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, del.ID); err != nil {
		t.Fatal(err)
	}
	// The newest version of each key, in Go: FINAL with a WHERE on
	// is_deleted is not the same query on 18.16 and on 26.
	rows, err := conn.Query(ctx, "SELECT toString(id), toUInt8(is_deleted) FROM `"+topic+"` FINAL")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var live []string
	for rows.Next() {
		var id string
		var deleted uint8
		if err := rows.Scan(&id, &deleted); err != nil {
			t.Fatal(err)
		}
		if deleted == 0 {
			live = append(live, id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(live)
	if !slices.Equal(live, []string{"1"}) {
		t.Fatalf("live rows %v after the delete of 2 committed, want [1]: the delete written ahead while the table's creating batch was undecided was lost", live)
	}
}
