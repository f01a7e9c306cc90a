package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	chsink "github.com/txsink/txsink/connectors/clickhouse"
	"github.com/txsink/txsink/connectors/sinktest"
	"github.com/txsink/txsink/integration/harness"
)

// TestClickHouseConformance runs the sink conformance suite
// (connectors/sinktest) on the ClickHouse sink, on the server of the lane
// TXSINK_TEST_CLICKHOUSE_LANE names (18.16 with ZooKeeper, or 26.x), with
// the batches' records produced to a real Kafka topic: a batch committed
// by an instance that did not prepare it is re-read from there.
// ClickHouse has no transactions, so WriteLocal's exactly_once_sink mode
// is checked to be refused and then skipped.
func TestClickHouseConformance(t *testing.T) {
	k := harness.Kafka(t)
	ch := harness.ClickHouse(t)
	cl := k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	srv := chServerOf(t, ch.Conn(t, "default"))
	t.Logf("ClickHouse %s, lane %s, ZooKeeper %v", srv.version, ch.Lane, ch.HasZooKeeper)
	sinktest.Conformance(t, func(t *testing.T) sinktest.Harness {
		db := ch.NewDatabase(t)
		conn := ch.Conn(t, db)
		connector := fmt.Sprintf("conf-%08x", rand.Uint32())
		return sinktest.Harness{
			Connector: connector,
			Open: func(t *testing.T) connectors.Sink {
				cfg := chsink.Config{
					Connector: connector, Delivery: "exactly_once", Addr: []string{ch.Addr}, Database: db,
					User: ch.User, Password: ch.Password, DialTimeout: 5 * time.Second, TableNameFormat: "${topic}",
					OffsetsTable: "txsink_offsets", IntentsTable: "txsink_intents",
					BlockRows: 1000, Dedup: "auto", RedoSkipPresent: true,
				}
				env := connectors.Env{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Bootstrap: []string{k.Bootstrap}}
				s, err := chsink.Open(context.Background(), env, cfg)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Close)
				return s
			},
			NewTopic: func(t *testing.T, partitions int32) string {
				topic := fmt.Sprintf("conf_%08x", rand.Uint32())
				k.CreateTopic(t, topic, partitions)
				chExec(t, conn, "CREATE TABLE `"+topic+"` (id String, __connect_topic String, __connect_partition Int32, __connect_offset Int64) ENGINE = "+chEngine(ch, db, topic, 1000))
				return topic
			},
			Produce: func(t *testing.T, topic string, partition int32, values [][]byte) []*kgo.Record {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var recs []*kgo.Record
				for _, v := range values {
					recs = append(recs, &kgo.Record{Topic: topic, Partition: partition, Value: v})
				}
				if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
					t.Fatalf("produce to %s[%d]: %v", topic, partition, err)
				}
				return recs
			},
			IDs: func(t *testing.T, topic string) []string {
				rows, err := conn.Query(context.Background(), "SELECT id FROM `"+topic+"`")
				if err != nil {
					t.Fatal(err)
				}
				defer rows.Close()
				var out []string
				for rows.Next() {
					var id string
					if err := rows.Scan(&id); err != nil {
						t.Fatal(err)
					}
					out = append(out, id)
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				return out
			},
			Local:    []sinktest.LocalMode{sinktest.AtLeastOnce, sinktest.AtMostOnce},
			LocalWhy: chsink.ErrNoLocalTransactions.Error(),
			Stager:   true,
		}
	})
}
