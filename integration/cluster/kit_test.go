package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/integration/harness"
	"github.com/txsink/txsink/integration/upstream"
	"github.com/txsink/txsink/internal/verify"
)

// env is one test's world: the shared broker and server, its own topic,
// database, table and cluster of workers. The database password reaches
// the connectors only through the file config provider.
type env struct {
	t       *testing.T
	k       *harness.KafkaService
	db      string // with the password, for the test's own reads
	dbUser  string // without it, the connector's connection.url
	secrets string // the properties file holding it (key pg)
	pool    *pgxpool.Pool
	topic   string
	parts   int32
	cl      *harness.Cluster
	dir     string
}

// newEnv prepares a topic of parts partitions, a database with the events
// table, and a cluster (no worker yet) with the given worker settings and
// extra flags of "txsink serve".
func newEnv(t *testing.T, parts int32, settings map[string]string, args ...string) *env {
	t.Helper()
	k := harness.Kafka(t)
	pg := harness.Postgres(t)
	e := &env{t: t, k: k, db: pg.NewDatabase(t), parts: parts, dir: t.TempDir()}
	u, err := url.Parse(e.db)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	u.User = url.User(u.User.Username())
	e.dbUser = u.String()
	e.secrets = filepath.Join(e.dir, "secrets", "db.properties")
	if err := os.MkdirAll(filepath.Dir(e.secrets), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.secrets, []byte("pg="+pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.topic = fmt.Sprintf("cluster-%s-%08x", strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")), rand.Uint32())
	k.CreateTopic(t, e.topic, parts)
	e.pool, err = pgxpool.New(context.Background(), e.db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	// No primary key: duplicates stay visible.
	if _, err := e.pool.Exec(context.Background(), `CREATE TABLE events (id text NOT NULL, seq bigint, body text,
		__connect_topic text, __connect_partition int, __connect_offset bigint)`); err != nil {
		t.Fatal(err)
	}
	s := map[string]string{
		"config.providers":                          "file",
		"config.providers.file.param.allowed.paths": filepath.Dir(e.secrets),
		"session.timeout.ms":                        "6000",
		"heartbeat.interval.ms":                     "1000",
		"rebalance.timeout.ms":                      "30000",
		"scheduled.rebalance.max.delay.ms":          "0",
	}
	maps.Copy(s, settings)
	e.cl = harness.NewCluster(t, harness.ClusterOptions{Bootstrap: k.Bootstrap, Settings: s, Args: args, Dir: filepath.Join(e.dir, "workers")})
	return e
}

// start adds n workers.
func (e *env) start(n int) []*harness.Worker {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out []*harness.Worker
	for range n {
		out = append(out, e.cl.Add(ctx))
	}
	return out
}

// connectorName returns a connector name unique to the run (its consumer
// group, txsink-<name>, too).
func (e *env) connectorName(prefix string) string {
	return fmt.Sprintf("%s-%08x", prefix, rand.Uint32())
}

// connector returns a PostgreSQL connector configuration whose password
// is a file provider reference.
func (e *env) connector(delivery string, tasks int) map[string]string {
	return map[string]string{
		"connector.class":        "postgres",
		"topics":                 e.topic,
		"connection.url":         e.dbUser,
		"connection.password":    "${file:" + e.secrets + ":pg}",
		"delivery.guarantee":     delivery,
		"pk.mode":                "kafka",
		"table.name.format":      "events",
		"tasks.max":              strconv.Itoa(tasks),
		"batch.max.records":      "500",
		"batch.linger.ms":        "50",
		"session.timeout.ms":     "6000",
		"transaction.timeout.ms": "10000",
	}
}

// do sends a request to a worker, failing the test on a transport error.
func do(t *testing.T, w *harness.Worker, method, path string, body any) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code, b, err := w.Do(ctx, method, path, body)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, w.ID, err)
	}
	return code, string(b)
}

// must sends a request and requires the status code, retrying a 409 that
// says a rebalance is under way (as a client of Kafka Connect does).
func must(t *testing.T, w *harness.Worker, want int, method, path string, body any) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code, b := do(t, w, method, path, body)
		if code == want {
			return b
		}
		if code == 409 && (strings.Contains(b, "rebalance") || strings.Contains(b, "stale configuration") || strings.Contains(b, "conflicting operation")) && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		t.Fatalf("%s %s on %s: %d %s, want %d", method, path, w.ID, code, b, want)
	}
}

// apiStatus is the Connect part of GET …/status.
type apiStatus struct {
	Connector struct {
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
	} `json:"connector"`
	Tasks []apiTask `json:"tasks"`
}

type apiTask struct {
	ID       int    `json:"id"`
	State    string `json:"state"`
	WorkerID string `json:"worker_id"`
	Trace    string `json:"trace,omitempty"`
	// Txsink holds txsink's details of the task (partitions owned), shown
	// by the worker that runs it.
	Txsink *struct {
		Partitions []struct {
			Partition int32 `json:"partition"`
		} `json:"partitions"`
		Waiting *struct {
			Cause string `json:"cause"`
			Error string `json:"error"`
		} `json:"waiting"`
	} `json:"txsink,omitempty"`
}

func status(t *testing.T, w *harness.Worker, name string) (apiStatus, bool) {
	t.Helper()
	code, b := do(t, w, "GET", "/connectors/"+name+"/status", nil)
	if code != 200 {
		return apiStatus{}, false
	}
	var st apiStatus
	if err := json.Unmarshal([]byte(b), &st); err != nil {
		t.Fatalf("status: %v: %s", err, b)
	}
	return st, true
}

// waitStatus polls a worker until cond holds.
func waitStatus(t *testing.T, w *harness.Worker, name string, d time.Duration, what string, cond func(apiStatus) bool) apiStatus {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st, ok := status(t, w, name)
		if ok && cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v on %s; last status %+v", what, d, w.ID, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runningOn reports whether every one of n tasks is RUNNING on a worker
// of ids, and returns the tasks per worker.
func runningOn(st apiStatus, n int, ids ...string) (bool, map[string]int) {
	per := map[string]int{}
	if len(st.Tasks) != n {
		return false, per
	}
	for _, ts := range st.Tasks {
		if ts.State != "RUNNING" || !slices.Contains(ids, ts.WorkerID) {
			return false, per
		}
		per[ts.WorkerID]++
	}
	return true, per
}

func ids(ws ...*harness.Worker) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}

// upstream starts a transactional producer on the env's topic.
func (e *env) upstream(rate int) (*upstream.Producer, func()) {
	p := upstream.New(upstream.Options{Name: "up", Bootstrap: e.k.Bootstrap, Topic: e.topic, Partitions: e.parts,
		Rate: rate, MaxTxn: 20, AbortRatio: 0.15, Seed: rand.Uint64(), Logf: e.t.Logf})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	stop := func() { cancel(); <-done }
	e.t.Cleanup(stop)
	return p, sync.OnceFunc(stop)
}

// sinkOffsets reads the connector's stored next offsets.
func (e *env) sinkOffsets(name string) map[int32]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := e.pool.Query(ctx, `SELECT partition, coalesce(next_offset, -1) FROM txsink_offsets WHERE connector = $1 AND topic = $2`, name, e.topic)
	if err != nil {
		return nil // the table may not exist yet
	}
	defer rows.Close()
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			e.t.Fatal(err)
		}
		out[p] = n
	}
	return out
}

// waitCaughtUp waits until the sink holds what the producer had
// acknowledged when called.
func (e *env) waitCaughtUp(name string, p *upstream.Producer, d time.Duration) {
	e.t.Helper()
	fr, _ := p.Snapshot()
	deadline := time.Now().Add(d)
	for !e.caughtUp(name, fr) {
		if time.Now().After(deadline) {
			e.t.Fatalf("the sink did not catch up within %v: %v, upstream %v", d, e.sinkOffsets(name), fr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// caughtUp reports whether the sink holds everything the producer had
// acknowledged (its frontier) when called.
func (e *env) caughtUp(name string, frontier map[int32]int64) bool {
	got := e.sinkOffsets(name)
	for p, f := range frontier {
		if got[p] < f {
			return false
		}
	}
	return true
}

// drain stops the producer and waits until the sink holds every
// acknowledged record.
func (e *env) drain(name string, p *upstream.Producer, stop func(), d time.Duration) {
	e.t.Helper()
	stop()
	fr, st := p.Snapshot()
	deadline := time.Now().Add(d)
	for !e.caughtUp(name, fr) {
		if time.Now().After(deadline) {
			e.t.Fatalf("not drained within %v: sink %v, upstream %v (%+v)", d, e.sinkOffsets(name), fr, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// check runs the exactly-once checker on the connector's table: every
// committed record exactly once, nothing of aborted transactions, no
// prepared leftovers, no lag.
func (e *env) check(name string) *verify.Report {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := verify.Check(ctx, verify.Config{
		Bootstrap: []string{e.k.Bootstrap}, Topics: []string{e.topic},
		Sink:          verify.SinkOptions{URL: e.db, Connector: name, Table: "events", IDColumn: "id", CompareColumns: []string{"seq"}},
		IDField:       "id",
		PreparedGrace: -1, CheckLag: true, MaxLag: 0,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func reportText(r *verify.Report) string {
	var b strings.Builder
	_ = r.WriteText(&b)
	return b.String()
}

// ownership is one task's ownership of one partition, from the workers'
// logs: from the moment it was assigned and fenced (it may process) to
// the moment it was revoked (or its process died).
type ownership struct {
	worker     int
	task       int
	partition  int32
	from, till time.Time
}

var positionRE = regexp.MustCompile(`(\S+)\[(\d+)\]=`)

// ownerships reads the ownership intervals of the topic's partitions from
// the workers' JSON logs. An interval still open when its incarnation
// ended (a kill) closes when the process exited; one of a running
// incarnation closes at end.
func ownerships(t *testing.T, ws []*harness.Worker, topic string, end time.Time) []ownership {
	t.Helper()
	var out []ownership
	for _, w := range ws {
		f, err := os.Open(w.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		exits := w.Exits()
		open := map[[2]int]time.Time{} // (task, partition) → since
		var last time.Time
		inc := -1
		closeAll := func(at time.Time) {
			for k, since := range open {
				out = append(out, ownership{worker: w.Index, task: k[0], partition: int32(k[1]), from: since, till: at})
			}
			clear(open)
		}
		exitOf := func(i int) time.Time {
			if i >= 0 && i < len(exits) {
				return exits[i]
			}
			return last
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var l struct {
				Time       time.Time `json:"time"`
				Msg        string    `json:"msg"`
				Task       *int      `json:"task"`
				Topic      string    `json:"topic"`
				Positions  string    `json:"positions"`
				Partitions logInts   `json:"partitions"`
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil || l.Time.IsZero() {
				continue
			}
			if l.Msg == "worker listening" {
				if inc >= 0 {
					closeAll(exitOf(inc))
				}
				inc++
			}
			last = l.Time
			if l.Task == nil {
				continue
			}
			switch l.Msg {
			case "partitions assigned and fenced":
				for _, m := range positionRE.FindAllStringSubmatch(l.Positions, -1) {
					if m[1] == topic {
						p, _ := strconv.Atoi(m[2])
						open[[2]int{*l.Task, p}] = l.Time
					}
				}
			case "partitions revoked":
				if l.Topic != topic {
					continue
				}
				for _, p := range l.Partitions {
					k := [2]int{*l.Task, int(p)}
					if since, ok := open[k]; ok {
						out = append(out, ownership{worker: w.Index, task: *l.Task, partition: p, from: since, till: l.Time})
						delete(open, k)
					}
				}
			}
		}
		f.Close()
		if w.Running() {
			closeAll(end)
		} else {
			closeAll(exitOf(inc))
		}
	}
	return out
}

// logInts is a list of partitions in a log line: the worker's log writes
// a slice as its text ("[5 2]"), a JSON array is read too. Before this
// type the parser expected only the array, so every "partitions revoked"
// line failed to parse and was dropped: a partition moved away in the
// first rebalances counted as the worker's until it was killed.
type logInts []int32

func (l *logInts) UnmarshalJSON(b []byte) error {
	var arr []int32
	if json.Unmarshal(b, &arr) == nil {
		*l = arr
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*l = nil
	for _, f := range strings.Fields(strings.Trim(s, "[]")) {
		n, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return fmt.Errorf("partitions %q: %w", s, err)
		}
		*l = append(*l, int32(n))
	}
	return nil
}

// gaps returns, per partition, the longest time within [from, to] that no
// ownership covered, and when it began.
func gaps(owns []ownership, parts int32, from, to time.Time) map[int32][2]time.Time {
	out := map[int32][2]time.Time{}
	for p := range parts {
		var iv []ownership
		for _, o := range owns {
			if o.partition == p && o.till.After(from) && o.from.Before(to) {
				iv = append(iv, o)
			}
		}
		sort.Slice(iv, func(i, j int) bool { return iv[i].from.Before(iv[j].from) })
		covered := from
		var worst [2]time.Time
		for _, o := range iv {
			if o.from.After(covered) && o.from.Sub(covered) > worst[1].Sub(worst[0]) {
				worst = [2]time.Time{covered, o.from}
			}
			if o.till.After(covered) {
				covered = o.till
			}
		}
		if to.After(covered) && to.Sub(covered) > worst[1].Sub(worst[0]) {
			worst = [2]time.Time{covered, to}
		}
		out[p] = worst
	}
	return out
}

// TestLogIntsReadsTheWorkerLog: both forms of a partition list in a log
// line are read, the text form as the worker writes it.
func TestLogIntsReadsTheWorkerLog(t *testing.T) {
	for _, c := range []struct {
		line string
		want []int32
	}{
		{`{"partitions":"[5 2]"}`, []int32{5, 2}},
		{`{"partitions":[4,3]}`, []int32{4, 3}},
		{`{"partitions":"[]"}`, nil},
	} {
		var l struct {
			Partitions logInts `json:"partitions"`
		}
		if err := json.Unmarshal([]byte(c.line), &l); err != nil || !slices.Equal([]int32(l.Partitions), c.want) {
			t.Errorf("%s: %v %v, want %v", c.line, l.Partitions, err, c.want)
		}
	}
}
