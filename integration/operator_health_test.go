package integration

// Health that tells, states that are true (issue 27, items 3 and 4): on a
// real worker ("txsink serve"), a real broker and a real PostgreSQL, a
// missing topic, a stopped broker, an unreachable database and an
// unreachable Schema Registry each leave the task RUNNING with a waiting
// detail naming the cause, in the status, in txsink_task_waiting and in
// GET /health; never FAILED. Before issue 27 a missing topic and a stopped
// broker showed a plain RUNNING (no detail, no metric, /health silent),
// and a database down at start showed FAILED.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/integration/faultnet"
	"github.com/txsink/txsink/integration/harness"
)

// healthTask is the part of a task's status these tests read.
type healthTask struct {
	State  string `json:"state"`
	Trace  string `json:"trace"`
	Txsink struct {
		Waiting *healthWait  `json:"waiting"`
		Waits   []healthWait `json:"waits"`
	} `json:"txsink"`
}

type healthWait struct {
	Cause string    `json:"cause"`
	Since time.Time `json:"since"`
	Error string    `json:"error"`
}

type healthAnswer struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Waiting []struct {
		Connector string `json:"connector"`
		Task      int    `json:"task"`
		Cause     string `json:"cause"`
	} `json:"waiting"`
}

// opHealthTask returns task 0's status ("" state when not there yet).
func opHealthTask(t *testing.T, w *worker, name string) (healthTask, string) {
	t.Helper()
	code, b := w.call(t, "GET", "/connectors/"+name+"/status", nil)
	var st struct {
		Tasks []healthTask `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(b), &st); err != nil || code != 200 || len(st.Tasks) == 0 {
		return healthTask{}, fmt.Sprintf("%d %s", code, b)
	}
	return st.Tasks[0], b
}

// metricSample returns the value of the series of metric whose labels
// include every label of want ("" and false when none).
func metricSample(t *testing.T, w *worker, metric string, want map[string]string) (float64, bool) {
	t.Helper()
	code, body := w.call(t, "GET", "/metrics", nil)
	if code != 200 {
		t.Fatalf("GET /metrics: %d", code)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(metric) + `\{([^}]*)\} (\S+)$`)
next:
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		for k, v := range want {
			if !strings.Contains(m[1], k+`="`+v+`"`) {
				continue next
			}
		}
		f, err := strconv.ParseFloat(m[2], 64)
		return f, err == nil
	}
	return 0, false
}

// opWaiting reports whether task 0 of name is RUNNING and waits for cause
// with an error containing want, in the status, the metric and /health.
func opWaiting(t *testing.T, w *worker, name, cause, want string) (bool, string) {
	ts, raw := opHealthTask(t, w, name)
	if ts.State != "RUNNING" {
		return false, "status: " + raw
	}
	var found *healthWait
	for i := range ts.Txsink.Waits {
		if ts.Txsink.Waits[i].Cause == cause {
			found = &ts.Txsink.Waits[i]
		}
	}
	if found == nil || !strings.Contains(found.Error, want) || ts.Txsink.Waiting == nil {
		return false, "status: " + raw
	}
	if v, ok := metricSample(t, w, "txsink_task_waiting", map[string]string{"connector": name, "task": "0", "cause": cause}); !ok || v != 1 {
		return false, fmt.Sprintf("txsink_task_waiting{cause=%q} = %v (%v)", cause, v, ok)
	}
	code, b := w.call(t, "GET", "/health", nil)
	var h healthAnswer
	if err := json.Unmarshal([]byte(b), &h); err != nil || code != 200 {
		return false, fmt.Sprintf("/health: %d %s", code, b)
	}
	for _, hw := range h.Waiting {
		if hw.Connector == name && hw.Task == 0 && hw.Cause == cause && strings.Contains(h.Message, "waiting for a dependency") {
			return true, ""
		}
	}
	return false, "/health: " + b
}

// opRunningClear reports whether task 0 is RUNNING with no waiting cause
// and txsink_task_waiting 0 for cause.
func opRunningClear(t *testing.T, w *worker, name, cause string) (bool, string) {
	ts, raw := opHealthTask(t, w, name)
	if ts.State != "RUNNING" || ts.Txsink.Waiting != nil || len(ts.Txsink.Waits) > 0 {
		return false, "status: " + raw
	}
	if v, ok := metricSample(t, w, "txsink_task_waiting", map[string]string{"connector": name, "task": "0", "cause": cause}); !ok || v != 0 {
		return false, fmt.Sprintf("txsink_task_waiting{cause=%q} = %v (%v)", cause, v, ok)
	}
	return true, ""
}

// opNeverFailed fails the test when the task is FAILED.
func opNeverFailed(t *testing.T, w *worker, name string) {
	t.Helper()
	if ts, raw := opHealthTask(t, w, name); ts.State == "FAILED" {
		t.Fatalf("task FAILED although it retries by itself: %s", raw)
	}
}

// TestOperatorHealthTopicMissing: topics=<a topic that does not exist>
// is RUNNING and waiting for the topic, naming it, in the status, the
// metric and /health; once the topic is created the wait ends and its
// records are written.
func TestOperatorHealthTopicMissing(t *testing.T) {
	k, dbURL := sinkEnv(t)
	topic := "op_health_missing_" + randSuffix(t)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-health-topic")
	name := "op-health-topic-" + randSuffix(t)
	cfg := baseConnector(name, topic, dbURL, "exactly_once")
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	waitFor(t, 30*time.Second, "waiting for the topic", func() (bool, string) {
		return opWaiting(t, w, name, "topic", "topic "+topic+" does not exist")
	})
	pool := connectPool(t, dbURL)
	createEventsTable(t, pool, topic)
	createTopic(t, k, topic, 1)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 50, Partitions: 1, MaxTxn: 10, Seed: 2701}, &u)
	waitDrained(t, pool, name, &u, 45*time.Second, nil)
	waitFor(t, 30*time.Second, "waiting cleared", func() (bool, string) { return opRunningClear(t, w, name, "topic") })
}

// TestOperatorHealthBrokerStopped: with the worker's broker stopped the
// task waits for the broker; txsink_partition_lag keeps its last value
// and txsink_partition_lag_updated_timestamp_seconds stays before the
// stop (its staleness grows); restarted, the wait ends and new records
// are written.
func TestOperatorHealthBrokerStopped(t *testing.T) {
	k := harness.KafkaOwn(t)
	dbURL := harness.Postgres(t).NewDatabase(t)
	topic := "op_health_broker_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	pool := connectPool(t, dbURL)
	createEventsTable(t, pool, topic)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 50, Partitions: 1, MaxTxn: 10, Seed: 2702}, &u)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-health-broker")
	name := "op-health-broker-" + randSuffix(t)
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": baseConnector(name, topic, dbURL, "exactly_once")})
	waitDrained(t, pool, name, &u, 45*time.Second, nil)
	lagLabels := map[string]string{"connector": name, "topic": topic, "partition": "0"}
	var updatedBefore float64
	waitFor(t, 30*time.Second, "lag 0 looked up", func() (bool, string) {
		lag, ok := metricSample(t, w, "txsink_partition_lag", lagLabels)
		updatedBefore, _ = metricSample(t, w, "txsink_partition_lag_updated_timestamp_seconds", lagLabels)
		return ok && lag == 0 && updatedBefore > 0, fmt.Sprintf("lag %v (%v), updated %v", lag, ok, updatedBefore)
	})

	stoppedAt := float64(time.Now().UnixNano()) / 1e9
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := k.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 45*time.Second, "waiting for the broker", func() (bool, string) {
		return opWaiting(t, w, name, "broker", "no Kafka broker answers")
	})
	// Two scrapes apart: the lag is still there, its update time still
	// before the stop, so time() minus it grows.
	for i := range 2 {
		lag, ok := metricSample(t, w, "txsink_partition_lag", lagLabels)
		updated, _ := metricSample(t, w, "txsink_partition_lag_updated_timestamp_seconds", lagLabels)
		if !ok || lag != 0 {
			t.Fatalf("scrape %d with the broker stopped: txsink_partition_lag %v (%v), want its last value 0", i, lag, ok)
		}
		if updated < updatedBefore || updated > stoppedAt {
			t.Fatalf("scrape %d with the broker stopped: lag updated at %v, want between %v and the stop %v", i, updated, updatedBefore, stoppedAt)
		}
	}
	opNeverFailed(t, w, name)

	// The restart recovers the killed broker's logs first: under CI's load
	// that takes as long as a first start, so it gets the same bound.
	startCtx, cancelStart := context.WithTimeout(context.Background(), harness.StartTimeout)
	defer cancelStart()
	if err := k.Start(startCtx); err != nil {
		t.Fatal(err)
	}
	produce(t, k.Bootstrap, topic, produceOpts{Records: 80, Partitions: 1, MaxTxn: 10, Seed: 2703}, &u)
	waitDrained(t, pool, name, &u, 3*time.Minute, nil)
	waitFor(t, 30*time.Second, "waiting cleared", func() (bool, string) { return opRunningClear(t, w, name, "broker") })
	waitFor(t, 30*time.Second, "lag looked up again", func() (bool, string) {
		updated, _ := metricSample(t, w, "txsink_partition_lag_updated_timestamp_seconds", lagLabels)
		return updated > stoppedAt, fmt.Sprintf("updated %v, stop %v", updated, stoppedAt)
	})
}

// pgBehindProxy returns dbURL with its host replaced by a port on
// 127.0.0.1 where nothing listens yet (the database is unreachable), and
// a function that starts or stops a proxy there to the real server.
func pgBehindProxy(t *testing.T, dbURL string) (proxied string, up func(bool)) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	upstreamAddr := u.Host
	front := freeAddr(t)
	u.Host = front
	var px *faultnet.Proxy
	n := 0
	up = func(on bool) {
		t.Helper()
		if !on {
			if px != nil {
				_ = px.Close()
				px = nil
			}
			return
		}
		n++
		p, err := faultnet.New(fmt.Sprintf("pg-health-%s-%d", randSuffix(t), n), front, upstreamAddr, faultnet.Raw)
		if err != nil {
			t.Fatal(err)
		}
		px = p
	}
	t.Cleanup(func() { up(false) })
	return u.String(), up
}

// TestOperatorHealthDatabaseDownAtStart: a connector whose database is
// unreachable when it starts is RUNNING and waiting for the database
// (before issue 27: FAILED, which TxsinkTaskFailed pages on), never
// FAILED while it retries; once the database answers it opens by itself
// and drains.
func TestOperatorHealthDatabaseDownAtStart(t *testing.T) {
	k, dbURL := sinkEnv(t)
	topic := "op_health_dbstart_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	pool := connectPool(t, dbURL)
	createEventsTable(t, pool, topic)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 50, Partitions: 1, MaxTxn: 10, Seed: 2704}, &u)
	proxied, up := pgBehindProxy(t, dbURL)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-health-dbstart")
	name := "op-health-dbstart-" + randSuffix(t)
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": baseConnector(name, topic, proxied, "exactly_once")})
	waitFor(t, 30*time.Second, "waiting for the database", func() (bool, string) {
		return opWaiting(t, w, name, "database", "connect to PostgreSQL")
	})
	// The worker retries the open (backoff 200 ms up to 2 s): wait for a
	// retry in its log, then check it is still waiting, not FAILED.
	waitFor(t, 30*time.Second, "a retry", func() (bool, string) {
		return strings.Count(w.output(), "the sink database is unavailable") >= 2, tail(w.output(), 2000)
	})
	opNeverFailed(t, w, name)
	if v, _ := metricSample(t, w, "txsink_tasks", map[string]string{"connector": name, "state": "FAILED"}); v != 0 {
		t.Fatalf("txsink_tasks{state=FAILED} = %v", v)
	}
	up(true)
	waitDrained(t, pool, name, &u, 60*time.Second, nil)
	waitFor(t, 30*time.Second, "waiting cleared", func() (bool, string) { return opRunningClear(t, w, name, "database") })
}

// TestOperatorHealthDatabaseLost: a database lost while the task runs
// shows the task waiting for it (before issue 27: RUNNING with no trace);
// back, the wait ends and new records are written.
func TestOperatorHealthDatabaseLost(t *testing.T) {
	k, dbURL := sinkEnv(t)
	topic := "op_health_dblost_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	pool := connectPool(t, dbURL)
	createEventsTable(t, pool, topic)
	var u upstream
	produce(t, k.Bootstrap, topic, produceOpts{Records: 50, Partitions: 1, MaxTxn: 10, Seed: 2705}, &u)
	proxied, up := pgBehindProxy(t, dbURL)
	up(true)
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-health-dblost")
	name := "op-health-dblost-" + randSuffix(t)
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": baseConnector(name, topic, proxied, "exactly_once")})
	waitDrained(t, pool, name, &u, 45*time.Second, nil)

	up(false)
	produce(t, k.Bootstrap, topic, produceOpts{Records: 80, Partitions: 1, MaxTxn: 10, Seed: 2706}, &u)
	waitFor(t, 45*time.Second, "waiting for the database", func() (bool, string) {
		return opWaiting(t, w, name, "database", "")
	})
	opNeverFailed(t, w, name)
	up(true)
	waitDrained(t, pool, name, &u, 60*time.Second, nil)
	waitFor(t, 30*time.Second, "waiting cleared", func() (bool, string) { return opRunningClear(t, w, name, "database") })
	if problems := exactness(&u, readRows(t, pool, topic), anyOrder); len(problems) > 0 {
		t.Fatalf("%d anomalies, first: %s", len(problems), strings.Join(problems[:min(10, len(problems))], "; "))
	}
}

// TestOperatorHealthRegistryUnreachable: an Avro converter whose Schema
// Registry does not answer (a closed port on 127.0.0.1) leaves the task
// RUNNING and waiting for the registry, nothing written or skipped.
func TestOperatorHealthRegistryUnreachable(t *testing.T) {
	k, dbURL := sinkEnv(t)
	topic := "op_health_registry_" + randSuffix(t)
	createTopic(t, k, topic, 1)
	cl := k.Client(t)
	// Confluent's wire format: magic byte 0, schema id 7, a payload.
	rec := &kgo.Record{Topic: topic, Value: []byte{0, 0, 0, 0, 7, 2, 'x'}}
	if err := cl.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	w := startServe(t, k.Bootstrap, freeAddr(t), filepath.Join(t.TempDir(), "data"), "op-health-registry")
	name := "op-health-registry-" + randSuffix(t)
	cfg := baseConnector(name, topic, dbURL, "exactly_once")
	cfg["value.converter"] = "io.confluent.connect.avro.AvroConverter"
	cfg["value.converter.schema.registry.url"] = "http://" + freeAddr(t) // nothing listens there
	cfg["auto.create"] = "true"
	w.must(t, 201, "POST", "/connectors", map[string]any{"name": name, "config": cfg})
	waitFor(t, 45*time.Second, "waiting for the registry", func() (bool, string) {
		return opWaiting(t, w, name, "schema_registry", "schema registry")
	})
	opNeverFailed(t, w, name)
}
