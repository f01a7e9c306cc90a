package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/txsink/txsink/integration/harness"
)

// chEnv is the ClickHouse server of the run and a database on it.
type chEnv struct {
	svc  *harness.ClickHouseService
	db   string
	conn driver.Conn
}

// clickhouse measures, on each ClickHouse server the integration tests
// run on (harness.ClickHouseLanes: 18.16 with ZooKeeper and block
// de-duplication, ClickHouse 26 with tokens into MergeTree), the raw
// clickhouse-go batch insert of the main workload's rows and, when
// cmd/txsink registers the "clickhouse" sink, txsink's ClickHouse sink in
// exactly_once on the same records. With TXSINK_TEST_CLICKHOUSE_ADDR set,
// that one server is measured.
func (b *bench) clickhouse(ctx context.Context) error {
	lanes := harness.ClickHouseLanes
	if os.Getenv(harness.EnvClickHouseAddr) != "" {
		lanes = lanes[:1]
	}
	for _, lane := range lanes {
		if err := b.clickhouseLane(ctx, lane); err != nil {
			return err
		}
	}
	return nil
}

// clickhouseLane measures the ClickHouse rows on lane's server.
func (b *bench) clickhouseLane(ctx context.Context, lane string) error {
	w := b.mainWorkload
	rawRows := []*Row{}
	sinkRow := &Row{System: "txsink-clickhouse", Mode: "exactly_once"}
	server := "CH"
	if lane != harness.LaneDefault {
		server = "CH lane " + lane
	}
	var chRounds []roundLine
	addSkipped := func(reason string) {
		for _, r := range append(rawRows, sinkRow) {
			r.Skipped = reason
			b.rep.Rows = append(b.rep.Rows, r)
		}
	}
	if w == nil {
		sinkRow.Workload = "—"
		addSkipped("no main workload measured")
		return nil
	}
	for _, chunk := range []int{10_000, 100_000} {
		rawRows = append(rawRows, &Row{System: "clickhouse-raw", Mode: fmt.Sprintf("batch %dk", chunk/1000), Workload: w.Name + " " + server, ValueBytes: w.ValueBytes, Partitions: w.Partitions, Records: w.Records})
	}
	sinkRow.Workload, sinkRow.ValueBytes, sinkRow.Partitions, sinkRow.Records = w.Name+" "+server, w.ValueBytes, w.Partitions, w.Records
	perRun := 3*time.Duration(float64(w.Records)/20_000*float64(time.Second)) + 10*time.Second
	if reason := b.budgetLeft(time.Minute + time.Duration(b.o.Runs)*perRun); reason != "" {
		addSkipped(reason)
		return nil
	}
	registered, why := b.clickhouseRegistered(ctx)
	var env chEnv
	image := "clickhouse " + envOr(harness.EnvClickHouseImage, harness.DefaultClickHouseImage)
	b.logf("starting ClickHouse and ZooKeeper (integration/harness)")
	if lane == harness.Lane26 {
		image = "clickhouse " + envOr(harness.EnvClickHouse26Image, harness.DefaultClickHouse26Image)
		b.logf("starting ClickHouse of lane 26, without ZooKeeper (integration/harness)")
	}
	if err := catch(func() {
		env.svc = harness.ClickHouseOfLane(b.tb, lane)
		env.db = env.svc.NewDatabase(b.tb)
	}); err != nil {
		addSkipped("ClickHouse unavailable: " + oneLine(err.Error()))
		return nil
	}
	b.rep.Images = append(b.rep.Images, image)
	var err error
	if env.conn, err = clickhouse.Open(env.svc.Options(env.db)); err != nil {
		return err
	}
	defer env.conn.Close()
	var version string
	if err := env.conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return err
	}
	for _, r := range append(rawRows, sinkRow) {
		r.Workload = w.Name + " CH " + shortVersion(version)
	}
	engineNote := "MergeTree with non_replicated_deduplication_window = 1000 (insert_deduplication_token)"
	if env.svc.HasZooKeeper {
		engineNote = "ReplicatedMergeTree (block de-duplication)"
	}
	b.rep.Notes = append(b.rep.Notes, fmt.Sprintf("ClickHouse %s (rows \"%s\"): tables %s, ORDER BY tuple(); INSERTs name their columns", version, w.Name+" CH "+shortVersion(version), engineNote))
	rows := make([][]any, w.Records)
	for i := range rows {
		r := makeRow(int64(i+1), w.ValueBytes)
		rows[i] = []any{r.ID, r.Seq, r.Body}
	}
	for run := 0; run < b.o.Runs; run++ {
		for i, chunk := range []int{10_000, 100_000} {
			table := b.name("chraw")
			if err := env.createTable(ctx, table); err != nil {
				return err
			}
			start := time.Now()
			for lo := 0; lo < len(rows); lo += chunk {
				batch, err := env.conn.PrepareBatch(ctx, "INSERT INTO "+table+" (id, seq, body)")
				if err != nil {
					return err
				}
				for _, r := range rows[lo:min(lo+chunk, len(rows))] {
					if err := batch.Append(r...); err != nil {
						return err
					}
				}
				if err := batch.Send(); err != nil {
					return fmt.Errorf("raw ClickHouse insert: %w", err)
				}
			}
			d := time.Since(start)
			if err := env.checkCount(ctx, table, w.Records); err != nil {
				return err
			}
			_ = env.conn.Exec(ctx, "DROP TABLE IF EXISTS "+table)
			rawRows[i].Runs = append(rawRows[i].Runs, Run{Seconds: d.Seconds(), RPS: float64(w.Records) / d.Seconds()})
			b.logf("ClickHouse %s run %d: raw batch %d %.0f rec/s", version, run+1, chunk, float64(w.Records)/d.Seconds())
		}
		if !registered {
			continue
		}
		res, rounds, err := b.runTxsinkClickHouse(ctx, env, w)
		if err != nil {
			sinkRow.Skipped = "failed: " + oneLine(err.Error())
			b.logf("txsink ClickHouse sink failed: %v", err)
			registered = false
			continue
		}
		sinkRow.Runs = append(sinkRow.Runs, res)
		chRounds = append(chRounds, rounds...)
		b.logf("ClickHouse %s run %d: txsink exactly_once %.0f rec/s", version, run+1, res.RPS)
	}
	if !registered && sinkRow.Skipped == "" {
		sinkRow.Skipped = why
	}
	var ceiling float64
	for _, r := range rawRows {
		r.finish()
		ceiling = max(ceiling, r.MedianRPS)
	}
	sinkRow.finish()
	if len(chRounds) > 0 {
		sinkRow.Phases = phases(chRounds)
		sinkRow.Rounds = len(chRounds)
	}
	for _, r := range append(rawRows, sinkRow) {
		if ceiling > 0 && r.MedianRPS > 0 {
			r.RatioCeiling = r.MedianRPS / ceiling
		}
		b.rep.Rows = append(b.rep.Rows, r)
	}
	return nil
}

// shortVersion is major.minor of a version() text: "26.9.2.1" → "26.9".
func shortVersion(v string) string {
	f := strings.SplitN(v, ".", 3)
	if len(f) < 2 {
		return v
	}
	return f[0] + "." + f[1]
}

// createTable creates a table the sink can insert into exactly once:
// replicated (identical blocks) with ZooKeeper, else a MergeTree with a
// de-duplication window (tokens).
func (env chEnv) createTable(ctx context.Context, table string) error {
	engine := "MergeTree() ORDER BY tuple() SETTINGS non_replicated_deduplication_window = 1000"
	if env.svc.HasZooKeeper {
		engine = fmt.Sprintf("ReplicatedMergeTree('/clickhouse/tables/{shard}/%s/%s', '{replica}') ORDER BY tuple()", env.db, table)
	}
	return env.conn.Exec(ctx, "CREATE TABLE "+table+" (id String, seq Int64, body String) ENGINE = "+engine)
}

func (env chEnv) checkCount(ctx context.Context, table string, n int) error {
	var cnt, distinct uint64
	if err := env.conn.QueryRow(ctx, "SELECT count(), uniqExact(seq) FROM "+table).Scan(&cnt, &distinct); err != nil {
		return err
	}
	if cnt != uint64(n) || distinct != uint64(n) {
		return fmt.Errorf("ClickHouse table %s: %d rows, %d distinct seqs, want %d", table, cnt, distinct, n)
	}
	return nil
}

// clickhouseRegistered asks the built txsink whether it knows the
// "clickhouse" connector class, by validating a config with it.
func (b *bench) clickhouseRegistered(ctx context.Context) (bool, string) {
	cfg := map[string]string{"name": "probe-clickhouse", "connector.class": "clickhouse", "topics": "probe"}
	path, err := writeConnectorFile(b.tmp, cfg)
	if err != nil {
		return false, err.Error()
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(cctx, b.bin, "run", "-bootstrap", b.bootstrap, "-config", path, "-worker-id", "probe").CombinedOutput()
	if strings.Contains(string(out), `unknown connector class "clickhouse"`) {
		return false, "the ClickHouse sink is not registered as \"clickhouse\" in cmd/txsink yet (connectors/clickhouse is being built)"
	}
	return true, ""
}

// runTxsinkClickHouse drains w with txsink's ClickHouse sink. The settings
// follow the PostgreSQL sink's names (connection.url, table.name.format).
func (b *bench) runTxsinkClickHouse(ctx context.Context, env chEnv, w *workload) (Run, []roundLine, error) {
	name := b.name("chsink")
	if err := env.createTable(ctx, name); err != nil {
		return Run{}, nil, err
	}
	defer env.conn.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+name)
	run, rounds, err := b.drain(ctx, w, name, map[string]string{
		"connector.class":    "clickhouse",
		"connection.url":     fmt.Sprintf("clickhouse://%s:%s@%s/%s", env.svc.User, env.svc.Password, env.svc.Addr, env.db),
		"delivery.guarantee": "exactly_once",
	}, nil)
	if err != nil {
		return Run{}, rounds, err
	}
	if err := env.checkCount(ctx, name, w.Records); err != nil {
		return Run{}, rounds, err
	}
	return run, rounds, nil
}
