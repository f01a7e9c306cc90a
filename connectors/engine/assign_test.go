package engine_test

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
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
	r := newMemRigOn(t, "ev", 4)
	r.want = produceTxns(t, r.c.ListenAddrs(), "ev", 40)
	// The sink's settings: a URL and a password, both given as references.
	spec := r.spec(nil)
	spec.Defs = config.Defs{
		{Name: "connection.url", Type: config.String, Required: true},
		{Name: "connection.password", Type: config.Password},
	}
	var mu sync.Mutex
	var opened []config.Values // what each sink instance was opened with
	open := spec.New
	spec.New = func(ctx context.Context, env connectors.Env, c config.Connector, v config.Values) (connectors.Sink, error) {
		mu.Lock()
		opened = append(opened, maps.Clone(v))
		mu.Unlock()
		return open(ctx, env, c, v)
	}
	reg := &connectors.Registry{}
	if err := reg.Register(spec); err != nil {
		t.Fatal(err)
	}
	const resolvedURL, resolvedPassword = "mem://resolved-url-41c9", "resolved-Pw-7f3a"
	var resolvedFrom map[string]string
	e, err := engine.New(reg, engine.Options{
		WorkerID: "w1", Bootstrap: r.c.ListenAddrs(),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Resolve: func(_ context.Context, raw map[string]string) (map[string]string, []string, error) {
			resolvedFrom = maps.Clone(raw)
			out := maps.Clone(raw)
			out["connection.url"] = resolvedURL
			out["connection.password"] = resolvedPassword
			return out, []string{resolvedURL, resolvedPassword}, nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	raw := map[string]string{
		"name": "part", "connector.class": "memory", "topics": "ev", "tasks.max": "4",
		"connection.url": "${test:url}", "connection.password": "${test:password}",
		"delivery.guarantee": "exactly_once_sink",
		"batch.max.records":  "50", "batch.linger.ms": "5", "session.timeout.ms": "3000",
	}
	ctx := context.Background()
	e.Apply(ctx, "part", engine.Config{Raw: raw, Target: engine.TargetRunning, Partial: true, Assigned: []int{0, 2}})
	if got := taskIDs(t, e, "part"); !slices.Equal(got, []int{0, 2}) {
		t.Fatalf("tasks here: %v, want [0 2]", got)
	}
	if resolvedFrom["connection.url"] != "${test:url}" {
		t.Errorf("Resolve got %q, want the stored reference", resolvedFrom["connection.url"])
	}
	mu.Lock()
	for _, v := range opened {
		if v["connection.url"] != resolvedURL || v["connection.password"] != resolvedPassword {
			t.Errorf("sink opened with url %q, password %q; want the resolved values", v["connection.url"], v["connection.password"])
		}
	}
	if len(opened) == 0 {
		t.Error("no sink opened")
	}
	mu.Unlock()
	if !slices.Contains(e.Secrets(), resolvedPassword) {
		t.Error("Secrets misses the resolved password")
	}
	if !slices.Contains(e.Secrets(), resolvedURL) {
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
	r.ev.waitFor(t, "half the records stored", func() bool { return r.distinct() >= len(r.want)/2 })
	e.Apply(ctx, "part", engine.Config{Raw: raw, Target: engine.TargetRunning, Partial: true, Assigned: []int{2, 3}})
	if got := taskIDs(t, e, "part"); !slices.Equal(got, []int{2, 3}) {
		t.Fatalf("tasks here after reassignment: %v, want [2 3]", got)
	}
	r.ev.waitFor(t, "every record stored", func() bool { return r.distinct() >= len(r.want) })

	// No task assigned: the tasks stop (so the store is settled for the
	// check) and the sink stays open for the connector's own state.
	e.Apply(ctx, "part", engine.Config{Raw: raw, Target: engine.TargetRunning, Partial: true})
	r.check(t, false)
	if running, _ := e.Running("part"); !running {
		t.Error("a connector with no task here closed its sink")
	}
	if got := taskIDs(t, e, "part"); len(got) != 0 {
		t.Errorf("tasks here with none assigned: %v", got)
	}
}
