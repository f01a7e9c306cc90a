package engine_test

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/postgres"
)

// taskIDs returns the ids of the tasks the engine shows for the connector.
func taskIDs(t *testing.T, e *engine.Engine, name string) []int {
	t.Helper()
	st, ok := e.Status(context.Background(), name)
	if !ok {
		t.Fatalf("%s unknown to the engine", name)
	}
	var ids []int
	for _, ts := range st.Tasks {
		if ts.State != engine.StateRunning {
			t.Fatalf("task %d is %s (%s)", ts.ID, ts.State, ts.Trace)
		}
		ids = append(ids, ts.ID)
	}
	return ids
}

// TestPartialAssignmentAndResolve: in distributed mode a worker runs only
// the tasks assigned to it, a new assignment moves only what changed, and
// the configuration is resolved (config providers) before the sink opens,
// its resolved secrets reaching Secrets but never the stored
// configuration.
func TestPartialAssignmentAndResolve(t *testing.T) {
	c, db, pool := kfakeAndTable(t, "events", 4, `CREATE TABLE events (id text, seq bigint, __connect_topic text, __connect_partition int, __connect_offset bigint)`)
	want := produceTxns(t, c.ListenAddrs(), "events", 40)
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	const resolvedPassword = "resolved-Pw-7f3a"
	var resolvedFrom map[string]string
	e, err := engine.New(reg, engine.Options{
		WorkerID: "w1", Bootstrap: c.ListenAddrs(),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Resolve: func(_ context.Context, raw map[string]string) (map[string]string, []string, error) {
			resolvedFrom = maps.Clone(raw)
			out := maps.Clone(raw)
			out["connection.url"] = db
			out["connection.password"] = resolvedPassword // trust authentication ignores it
			return out, []string{db, resolvedPassword}, nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	raw := map[string]string{
		"name": "part", "connector.class": "postgres", "topics": "events", "tasks.max": "4",
		"connection.url": "${test:url}", "delivery.guarantee": "exactly_once_sink", "pk.mode": "kafka",
		"batch.max.records": "50", "batch.linger.ms": "5", "session.timeout.ms": "3000",
	}
	ctx := context.Background()
	e.Apply(ctx, "part", engine.Config{Raw: raw, Target: engine.TargetRunning, Partial: true, Assigned: []int{0, 2}})
	if got := taskIDs(t, e, "part"); !slices.Equal(got, []int{0, 2}) {
		t.Fatalf("tasks here: %v, want [0 2]", got)
	}
	if resolvedFrom["connection.url"] != "${test:url}" {
		t.Errorf("Resolve got %q, want the stored reference", resolvedFrom["connection.url"])
	}
	if !slices.Contains(e.Secrets(), resolvedPassword) {
		t.Error("Secrets misses the resolved password")
	}
	if !slices.Contains(e.Secrets(), db) {
		t.Error("Secrets misses the resolved URL (a value from a reference, in a setting that is not a secret)")
	}
	sn, _ := e.Snapshot("part")
	if len(sn.Tasks) != 4 || sn.Tasks[1].State != "" || sn.Tasks[3].State != "" || sn.Tasks[0].State != engine.StateRunning {
		t.Errorf("snapshot: %+v", sn.Tasks)
	}
	if restartConn, tasks := e.MarkRestarting("part", true, false); !restartConn || !slices.Equal(tasks, []int{0, 2}) {
		t.Errorf("MarkRestarting: %v %v, want only the tasks here", restartConn, tasks)
	}
	e.Halt("part")

	// Tasks 0 and 2 run; the new assignment keeps 2, stops 0, starts 3.
	e.Apply(ctx, "part", engine.Config{Raw: raw, Target: engine.TargetRunning, Partial: true, Assigned: []int{0, 2}})
	waitCount(t, pool, `SELECT count(DISTINCT (__connect_partition, __connect_offset)) FROM events`, len(want)/2)
	e.Apply(ctx, "part", engine.Config{Raw: raw, Target: engine.TargetRunning, Partial: true, Assigned: []int{2, 3}})
	if got := taskIDs(t, e, "part"); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("tasks here after reassignment: %v, want [2 3]", got)
	}
	waitCount(t, pool, `SELECT count(*) FROM events`, len(want))
	time.Sleep(300 * time.Millisecond)
	var rows, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (__connect_partition, __connect_offset)) FROM events`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != len(want) || distinct != len(want) {
		t.Errorf("%d rows, %d distinct, want %d each", rows, distinct, len(want))
	}

	// No task assigned: the sink stays open for the connector's own state.
	e.Apply(ctx, "part", engine.Config{Raw: raw, Target: engine.TargetRunning, Partial: true})
	if running, _ := e.Running("part"); !running {
		t.Error("a connector with no task here closed its sink")
	}
	if got := taskIDs(t, e, "part"); len(got) != 0 {
		t.Errorf("tasks here with none assigned: %v", got)
	}
}
