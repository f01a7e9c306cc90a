package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder"
)

// clusterWorker is one distributed worker of a test cluster, with its API.
type clusterWorker struct {
	h   *herder.Distributed
	srv *httptest.Server
	env *env // for do/must against this worker
}

// newTestCluster starts n distributed workers on one in-memory Kafka, each
// serving the API on its own port (its advertised URL).
func newTestCluster(t *testing.T, n int) ([]*clusterWorker, *fakeStore, *kfake.Cluster) {
	t.Helper()
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, "orders"), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	store := newFakeStore()
	cc := config.Cluster{Enabled: true, GroupID: "cluster-" + t.Name(), ConfigTopic: "configs", StatusTopic: "status",
		ConfigReplication: 1, StatusReplication: 1, StatusPartitions: 3,
		Heartbeat: 100 * time.Millisecond, Session: time.Second, Rebalance: 5 * time.Second}
	var ws []*clusterWorker
	for i := range n {
		reg := &connectors.Registry{}
		if err := reg.Register(fakeSpec(store)); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(nil)
		id := srv.Listener.Addr().String()
		logs := &syncBuffer{}
		log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("worker", i)
		promReg := prometheus.NewRegistry()
		h, err := herder.NewDistributed(reg, herder.DistributedOptions{
			Engine: engine.Options{WorkerID: id, Bootstrap: kc.ListenAddrs(), Log: log, Registerer: promReg,
				Restart: engine.RestartPolicy{Enabled: true, Initial: 50 * time.Millisecond, Max: time.Second}},
			Cluster: cc, URL: "http://" + id,
		})
		if err != nil {
			t.Fatal(err)
		}
		srv.Config.Handler = New(Options{Herder: h, Log: log, Metrics: promhttp.HandlerFor(promReg, promhttp.HandlerOpts{})})
		srv.Start()
		if err := h.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		w := &clusterWorker{h: h, srv: srv, env: &env{t: t, srv: srv, store: store, kafka: kc, logs: logs}}
		t.Cleanup(func() {
			srv.Close()
			h.Close()
			if t.Failed() {
				t.Logf("worker %d log:\n%s", i, tail(logs.String(), 4000))
			}
		})
		ws = append(ws, w)
	}
	return ws, store, kc
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// eventually retries cond for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last: %s", what, d, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type clusterStatus struct {
	Connector struct {
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
	} `json:"connector"`
	Tasks []struct {
		ID       int    `json:"id"`
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
	} `json:"tasks"`
}

func (w *clusterWorker) status(t *testing.T, name string) (clusterStatus, int) {
	r := w.env.do("GET", "/connectors/"+name+"/status", nil)
	var st clusterStatus
	if r.code == 200 {
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatal(err)
		}
	}
	return st, r.code
}

// TestClusterAPI: three workers on one Kafka; a connector created through
// one runs its six tasks spread over all three; every worker answers the
// same; writes through any worker act on the cluster (forwarded to the
// leader); a task restart reaches the worker that runs it; secrets in
// clear are refused.
func TestClusterAPI(t *testing.T) {
	ws, store, _ := newTestCluster(t, 3)
	for i, w := range ws {
		eventually(t, 20*time.Second, fmt.Sprintf("worker %d healthy", i), func() (bool, string) {
			r := w.env.do("GET", "/health", nil)
			return r.code == 200, string(r.body)
		})
	}
	cfg := map[string]string{"connector.class": "fake", "topics": "orders", "tasks.max": "6", "fake.url": "fake://u@db:1/x",
		"delivery.guarantee": "exactly_once_sink", "session.timeout.ms": "1000", "batch.linger.ms": "5"}

	// A secret in clear is refused, naming the setting.
	bad := map[string]string{"fake.secret": "Pa55word-in-clear"}
	for k, v := range cfg {
		bad[k] = v
	}
	eventually(t, 20*time.Second, "a clear secret refused", func() (bool, string) {
		r := ws[1].env.do("POST", "/connectors", map[string]any{"name": "c1", "config": bad})
		if r.code == 409 { // a rebalance under way
			return false, string(r.body)
		}
		if r.code != 400 || !strings.Contains(string(r.body), "fake.secret") || strings.Contains(string(r.body), "Pa55word") {
			t.Fatalf("clear secret: %d %s", r.code, r.body)
		}
		return true, ""
	})

	eventually(t, 20*time.Second, "create through worker 1", func() (bool, string) {
		r := ws[1].env.do("POST", "/connectors", map[string]any{"name": "c1", "config": cfg})
		return r.code == 201, fmt.Sprint(r.code, string(r.body))
	})
	eventually(t, 30*time.Second, "six tasks running, two per worker, seen alike by every worker", func() (bool, string) {
		var first clusterStatus
		for i, w := range ws {
			st, code := w.status(t, "c1")
			per := map[string]int{}
			for _, ts := range st.Tasks {
				if ts.State != "RUNNING" {
					return false, fmt.Sprintf("worker %d: %d %+v", i, code, st)
				}
				per[ts.WorkerID]++
			}
			if len(st.Tasks) != 6 || len(per) != 3 || st.Connector.State != "RUNNING" {
				return false, fmt.Sprintf("worker %d: %+v", i, st)
			}
			for id, n := range per {
				if n != 2 {
					return false, fmt.Sprintf("worker %s runs %d tasks", id, n)
				}
			}
			if i == 0 {
				first = st
			} else if !reflect.DeepEqual(st, first) {
				return false, fmt.Sprintf("worker %d answers %+v, worker 0 %+v", i, st, first)
			}
		}
		return true, ""
	})
	// Every worker shows each task's details as the worker running it
	// sees them: its partition.
	eventually(t, 20*time.Second, "every worker shows every task's partition", func() (bool, string) {
		for i, w := range ws {
			var st connectorStatus
			if err := json.Unmarshal(w.env.must(200, "GET", "/connectors/c1/status", nil).body, &st); err != nil {
				t.Fatal(err)
			}
			seen := map[int32]bool{}
			for _, ts := range st.Tasks {
				if ts.Txsink == nil || len(ts.Txsink.Partitions) != 1 {
					return false, fmt.Sprintf("worker %d: task %d details %+v", i, ts.ID, ts.Txsink)
				}
				seen[ts.Txsink.Partitions[0].Partition] = true
			}
			if len(seen) != 6 {
				return false, fmt.Sprintf("worker %d: partitions %v", i, seen)
			}
		}
		return true, ""
	})
	// Active topics, kept in the status topic: every worker shows them; a
	// reset through any worker empties them everywhere, until records are
	// written again.
	ws[0].env.produce(60)
	ws[0].env.waitRows("c1", 60)
	topicsAre := func(want string) {
		t.Helper()
		for i, w := range ws {
			eventually(t, 20*time.Second, fmt.Sprintf("worker %d shows active topics %s", i, want), func() (bool, string) {
				got := strings.TrimSpace(string(w.env.must(200, "GET", "/connectors/c1/topics", nil).body))
				return got == `{"c1":{"topics":`+want+`}}`, got
			})
		}
	}
	topicsAre(`["orders"]`)
	ws[1].env.must(202, "PUT", "/connectors/c1/topics/reset", nil)
	topicsAre(`[]`)
	ws[0].env.produce(12)
	ws[0].env.waitRows("c1", 72)
	topicsAre(`["orders"]`)

	// The cluster's metrics: one leader, three workers, two tasks each.
	leaders := 0
	for i, w := range ws {
		m := string(w.env.must(200, "GET", "/metrics", nil).body)
		if strings.Contains(m, "\ntxsink_cluster_leader 1\n") {
			leaders++
		}
		for _, want := range []string{"\ntxsink_cluster_workers 3\n", "\ntxsink_cluster_assigned{kind=\"task\"} 2\n"} {
			if !strings.Contains(m, want) {
				t.Errorf("worker %d metrics lack %q", i, strings.TrimSpace(want))
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d workers say they lead", leaders)
	}
	for _, path := range []string{"/connectors", "/connectors/c1", "/connectors/c1/config", "/connectors/c1/tasks"} {
		want := string(ws[0].env.must(200, "GET", path, nil).body)
		for i, w := range ws[1:] {
			if got := string(w.env.must(200, "GET", path, nil).body); got != want {
				t.Errorf("GET %s: worker %d answers %s, worker 0 %s", path, i+1, got, want)
			}
		}
	}

	// A configuration change through worker 2 is seen by worker 2 at once.
	cfg["batch.linger.ms"] = "7"
	ws[2].env.must(200, "PUT", "/connectors/c1/config", cfg)
	if got := ws[2].env.must(200, "GET", "/connectors/c1/config", nil).json(t).(map[string]any)["batch.linger.ms"]; got != "7" {
		t.Errorf("worker 2 after its PUT: batch.linger.ms = %v", got)
	}

	// A task restart through any worker reaches the task's worker.
	st, _ := ws[0].status(t, "c1")
	for _, ts := range st.Tasks {
		if ts.WorkerID != ws[0].srv.Listener.Addr().String() {
			ws[0].env.must(204, "POST", fmt.Sprintf("/connectors/c1/tasks/%d/restart", ts.ID), nil)
			break
		}
	}

	// A restart of the connector and its tasks through any worker restarts
	// every part on every worker: each partition is fenced again.
	store.mu.Lock()
	fence := store.fence
	store.mu.Unlock()
	r := ws[2].env.must(202, "POST", "/connectors/c1/restart?includeTasks=true", nil)
	if !strings.Contains(string(r.body), "RESTARTING") {
		t.Errorf("restart response shows nothing RESTARTING: %s", r.body)
	}
	eventually(t, 20*time.Second, "every partition fenced again", func() (bool, string) {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.fence >= fence+6, fmt.Sprintf("fence %d, was %d", store.fence, fence)
	})

	// Pause, resume, stop through the followers.
	ws[1].env.must(202, "PUT", "/connectors/c1/pause", nil)
	allSay := func(what string, ok func(clusterStatus) bool) {
		t.Helper()
		eventually(t, 20*time.Second, what, func() (bool, string) {
			for i, w := range ws {
				st, code := w.status(t, "c1")
				if code != 200 || !ok(st) {
					return false, fmt.Sprintf("worker %d: %d %+v", i, code, st)
				}
			}
			return true, ""
		})
	}
	allSay("paused everywhere", func(st clusterStatus) bool {
		if st.Connector.State != "PAUSED" || len(st.Tasks) != 6 {
			return false
		}
		for _, ts := range st.Tasks {
			if ts.State != "PAUSED" {
				return false
			}
		}
		return true
	})
	ws[2].env.must(202, "PUT", "/connectors/c1/resume", nil)
	allSay("running again", func(st clusterStatus) bool {
		for _, ts := range st.Tasks {
			if ts.State != "RUNNING" {
				return false
			}
		}
		return st.Connector.State == "RUNNING" && len(st.Tasks) == 6
	})
	ws[1].env.must(204, "PUT", "/connectors/c1/stop", nil)
	allSay("stopped", func(st clusterStatus) bool { return st.Connector.State == "STOPPED" && len(st.Tasks) == 0 })

	// Offsets: edited through a follower once the group is empty; every
	// worker reads the same.
	eventually(t, 20*time.Second, "offsets altered", func() (bool, string) {
		r := ws[2].env.do("PATCH", "/connectors/c1/offsets", map[string]any{"offsets": []any{
			map[string]any{"partition": map[string]any{"kafka_topic": "orders", "kafka_partition": 3}, "offset": map[string]any{"kafka_offset": 42}},
		}})
		return r.code == 200, fmt.Sprint(r.code, string(r.body))
	})
	want := string(ws[0].env.must(200, "GET", "/connectors/c1/offsets", nil).body)
	if !strings.Contains(want, `"kafka_offset":42`) {
		t.Errorf("offsets after PATCH: %s", want)
	}
	for i, w := range ws[1:] {
		if got := string(w.env.must(200, "GET", "/connectors/c1/offsets", nil).body); got != want {
			t.Errorf("worker %d offsets %s, worker 0 %s", i+1, got, want)
		}
	}
	store.mu.Lock()
	pos := store.pos["c1"]["orders"][3]
	store.mu.Unlock()
	if pos.Next != 42 {
		t.Errorf("sink offset of orders[3] = %d, want 42", pos.Next)
	}

	ws[2].env.must(204, "DELETE", "/connectors/c1", nil)
	for i, w := range ws {
		eventually(t, 10*time.Second, fmt.Sprintf("deleted on worker %d", i), func() (bool, string) {
			r := w.env.do("GET", "/connectors/c1", nil)
			return r.code == 404, fmt.Sprint(r.code)
		})
	}
}

// TestForwardHops: a request that came with forward=false is not
// forwarded again: the leader answers it, a follower answers 409.
func TestForwardHops(t *testing.T) {
	ws, _, _ := newTestCluster(t, 2)
	cfg := map[string]string{"connector.class": "fake", "topics": "orders", "fake.url": "fake://db/x", "delivery.guarantee": "exactly_once_sink"}
	eventually(t, 20*time.Second, "a connector created through worker 0, seen by both", func() (bool, string) {
		r := ws[0].env.do("POST", "/connectors", map[string]any{"name": "warm", "config": cfg})
		ok := r.code == 201 || r.code == 409 && strings.Contains(string(r.body), "already exists")
		return ok && ws[0].env.do("GET", "/connectors/warm", nil).code == 200 && ws[1].env.do("GET", "/connectors/warm", nil).code == 200, fmt.Sprint(r.code, string(r.body))
	})
	attempt := 0
	eventually(t, 20*time.Second, "the leader answers, the follower refuses", func() (bool, string) {
		attempt++
		var created, refused []string
		for i, w := range ws {
			name := fmt.Sprintf("x%d-%d", attempt, i)
			r := w.env.do("POST", "/connectors?forward=false", map[string]any{"name": name, "config": cfg})
			switch {
			case r.code == 201:
				created = append(created, name)
			case r.code == 409 && strings.Contains(string(r.body), "conflicting operation"):
				refused = append(refused, name)
			}
		}
		if len(created) != 1 || len(refused) != 1 {
			return false, fmt.Sprint(created, refused)
		}
		for _, w := range ws {
			if w.env.do("GET", "/connectors/"+refused[0], nil).code != 404 {
				t.Fatalf("the refused request created %s", refused[0])
			}
		}
		return true, ""
	})
}
