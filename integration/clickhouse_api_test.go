package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClickHouseRESTOffsets: the REST offsets endpoints of a real
// "txsink serve" read, rewind and reset the offsets a ClickHouse connector
// keeps in ClickHouse. After a rewind of one partition the connector
// re-delivers exactly the records from there on; after a full reset
// (DELETE, offsets.initial=earliest) it re-delivers everything. The table
// is a de-duplicating engine, so re-delivered identical blocks may or may
// not be dropped by the server: the check is on the stored offsets and on
// the set of rows (no loss, nothing aborted, nothing unknown).
func TestClickHouseRESTOffsets(t *testing.T) {
	k, ch, db, conn := chEnv(t)
	const topic, name = "chrest", "chrest"
	k.CreateTopic(t, topic, 2)
	createCHEvents(t, conn, topic, "MergeTree ORDER BY (__connect_partition, __connect_offset)")
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 3000, Partitions: 2, AbortRatio: 0.15, MaxTxn: 50, Seed: 900}, &u)

	w := startServe(t, k.Bootstrap, freeAddr(t), t.TempDir(), "w-chrest")
	cfg := chConnector(name, topic, ch, db, "at_least_once")
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	w.waitState(t, name, "RUNNING", 1, time.Minute)
	chWaitDrained(t, conn, name, &u, 2*time.Minute, nil)
	chExact(t, conn, &u, topic, topic)

	// Offsets edits need a STOPPED connector, as in Kafka Connect.
	code, body := w.call(t, "PATCH", "/connectors/"+name+"/offsets", `{"offsets":[]}`)
	if code != 400 {
		t.Errorf("PATCH offsets while RUNNING: %d %s, want 400", code, body)
	}
	w.must(t, 204, "PUT", "/connectors/"+name+"/stop", nil)
	w.waitState(t, name, "STOPPED", 0, time.Minute)

	// Read: the endpoint shows exactly what ClickHouse stores.
	offs := decodeOffsets(t, w.must(t, 200, "GET", "/connectors/"+name+"/offsets", nil))
	stored, err := chOffsets(context.Background(), conn, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(offs.Offsets) != 2 {
		t.Fatalf("GET offsets: %+v", offs)
	}
	for _, o := range offs.Offsets {
		if o.Partition.Topic != topic || stored[o.Partition.Partition] != o.Offset.Offset {
			t.Errorf("GET offsets %+v, ClickHouse stores %v", o, stored)
		}
	}

	// Rewind partition 0 to the middle of its records.
	u.mu.Lock()
	p0 := u.committed[0]
	rewind := p0[len(p0)/2].Offset
	u.mu.Unlock()
	w.must(t, 200, "PATCH", "/connectors/"+name+"/offsets",
		fmt.Sprintf(`{"offsets":[{"partition":{"kafka_topic":%q,"kafka_partition":0},"offset":{"kafka_offset":%d}}]}`, topic, rewind))
	stored, _ = chOffsets(context.Background(), conn, name)
	if stored[0] != rewind {
		t.Fatalf("stored offset of partition 0 is %d after PATCH, want %d", stored[0], rewind)
	}
	before, _ := chCounts(t, conn, topic, topic)
	w.must(t, 202, "PUT", "/connectors/"+name+"/resume", nil)
	w.waitState(t, name, "RUNNING", 1, time.Minute)
	chWaitDrained(t, conn, name, &u, 2*time.Minute, nil)
	after, _ := chCounts(t, conn, topic, topic)
	redelivered := int(after - before)
	want := len(p0) - len(p0)/2
	// at_least_once into a plain MergeTree: the rewound range is written
	// once more, exactly.
	if redelivered != want {
		t.Errorf("rewind re-delivered %d rows, want exactly the %d records of partition 0 from offset %d", redelivered, want, rewind)
	}
	if problems := exactness(&u, chRows(t, conn, topic, topic), map[int32][2]int64{0: {rewind, p0[len(p0)-1].Offset + 1}}); len(problems) > 0 {
		t.Fatalf("after rewind: %d anomalies, first: %s", len(problems), strings.Join(problems[:min(5, len(problems))], "; "))
	}

	// Reset: DELETE removes the stored offsets; offsets.initial=earliest
	// then re-delivers everything.
	w.must(t, 204, "PUT", "/connectors/"+name+"/stop", nil)
	w.waitState(t, name, "STOPPED", 0, time.Minute)
	w.must(t, 200, "DELETE", "/connectors/"+name+"/offsets", nil)
	if err := json.Unmarshal([]byte(w.must(t, 200, "GET", "/connectors/"+name+"/offsets", nil)), &offs); err != nil {
		t.Fatal(err)
	}
	if len(offs.Offsets) != 0 {
		t.Fatalf("offsets after DELETE: %+v", offs)
	}
	w.must(t, 202, "PUT", "/connectors/"+name+"/resume", nil)
	w.waitState(t, name, "RUNNING", 1, time.Minute)
	chWaitDrained(t, conn, name, &u, 2*time.Minute, nil)
	final, _ := chCounts(t, conn, topic, topic)
	if int(final-after) != u.total() {
		t.Errorf("reset re-delivered %d rows, want all %d committed records", final-after, u.total())
	}
	w.signal(syscall.SIGTERM)
	w.wait(30 * time.Second)
}
