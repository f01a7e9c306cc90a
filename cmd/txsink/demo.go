package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/txsink/txsink/api"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder"
	"github.com/txsink/txsink/internal/buildinfo"
	"github.com/txsink/txsink/internal/pglocal"
)

// demoOptions are the flags of "txsink demo".
type demoOptions struct {
	records        int
	partitions     int
	abortRatio     float64
	postgresURL    string
	nonInteractive bool
	timeout        time.Duration
	listen         string
}

func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demoOptions
	fs.IntVar(&o.records, "records", 20000, "records the upstream producer commits")
	fs.IntVar(&o.partitions, "partitions", 4, "partitions of the demo topic")
	fs.Float64Var(&o.abortRatio, "abort-ratio", 0.2, "fraction of upstream transactions aborted")
	fs.StringVar(&o.postgresURL, "postgres-url", "", "use this PostgreSQL database (needs max_prepared_transactions > 0) instead of a throwaway cluster")
	fs.BoolVar(&o.nonInteractive, "non-interactive", false, "print progress as plain lines and end after the verdict (for CI and logs); the default when standard output is not a terminal")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up when the sink has not caught up after this long")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "REST API address (port 0: any free port)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "non-interactive" })
	if !explicit && !isTerminal(stdout) {
		// "txsink demo | tee demo.log" ends after its verdict.
		o.nonInteractive = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	v, err := runDemo(ctx, o, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "txsink demo:", err)
		return 1
	}
	if !v.exact() {
		return 1
	}
	return exitOK
}

// verdict compares the sink with the upstream's committed records.
type verdict struct {
	committed, aborted, rows, missing, duplicated, unexpected int
}

func (v verdict) exact() bool {
	return v.missing == 0 && v.duplicated == 0 && v.unexpected == 0 && v.rows == v.committed
}

const demoTopic = "demo.orders"

// runDemo runs the main job on embedded services: an in-process Kafka
// (kfake) with a transactional producer that aborts some transactions, a
// throwaway PostgreSQL cluster (or -postgres-url), and an exactly_once
// connector. It returns the checker's verdict once the sink has drained.
func runDemo(ctx context.Context, o demoOptions, out io.Writer) (verdict, error) {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	start := time.Now()
	if o.listen == "" {
		o.listen = "127.0.0.1:0"
	}
	if o.timeout <= 0 {
		o.timeout = 2 * time.Minute
	}
	deadline := time.After(o.timeout)

	kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(o.partitions), demoTopic))
	if err != nil {
		return verdict{}, fmt.Errorf("start in-process Kafka: %w", err)
	}
	defer kafka.Close()
	say("kafka       in-process (franz-go kfake) at %s, topic %s with %d partitions", kafka.ListenAddrs()[0], demoTopic, o.partitions)

	dbURL := o.postgresURL
	if dbURL == "" {
		srv, err := pglocal.StartTemp(pglocal.Options{})
		if errors.Is(err, pglocal.ErrNoBinaries) {
			return verdict{}, fmt.Errorf("%w\n  install them (Debian/Ubuntu: apt-get install postgresql) or pass -postgres-url postgres://user@host/db (with max_prepared_transactions > 0)", err)
		}
		if err != nil {
			return verdict{}, fmt.Errorf("start a throwaway PostgreSQL: %w", err)
		}
		defer srv.Stop()
		dbURL, err = srv.CreateDatabase(ctx, "txsink_demo")
		if err != nil {
			return verdict{}, err
		}
		say("postgresql  throwaway cluster in %s (removed on exit)", srv.DataDir)
	} else {
		say("postgresql  %s", redactURL(dbURL))
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return verdict{}, err
	}
	defer pool.Close()
	const table = "demo_orders"
	if _, err := pool.Exec(ctx, `DROP TABLE IF EXISTS `+table+`; CREATE TABLE `+table+` (
		order_id text NOT NULL, amount numeric(12,2), placed_at timestamptz,
		__connect_topic text, __connect_partition int, __connect_offset bigint)`); err != nil {
		return verdict{}, fmt.Errorf("create the demo table: %w", err)
	}

	// The upstream producer.
	var produced, aborted atomic.Int64
	committed := map[[2]int64]string{}
	var mu sync.Mutex
	prodErr := make(chan error, 1)
	go func() { prodErr <- demoProduce(ctx, kafka.ListenAddrs(), o, committed, &mu, &produced, &aborted) }()

	// The worker with its REST API, and the connector created over REST.
	dataDir, err := os.MkdirTemp("", "txsink-demo-")
	if err != nil {
		return verdict{}, err
	}
	defer os.RemoveAll(dataDir)
	promReg := prometheus.NewRegistry()
	worker, err := herder.NewStandalone(registry(), herder.StandaloneOptions{DataDir: dataDir, Engine: engine.Options{
		WorkerID: "demo", Bootstrap: kafka.ListenAddrs(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: promReg,
	}})
	if err != nil {
		return verdict{}, err
	}
	defer worker.Close()
	if err := worker.Start(ctx); err != nil {
		return verdict{}, err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return verdict{}, fmt.Errorf("REST API: %w", err)
	}
	uiHist := api.NewUIHistory(worker, api.DefaultUIHistoryEvery, api.DefaultUIHistoryKeep, nil)
	hctx, hcancel := context.WithCancel(ctx)
	hdone := make(chan struct{})
	go func() { defer close(hdone); uiHist.Run(hctx) }()
	defer func() { hcancel(); <-hdone }()
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: api.New(api.Options{
		UIHistory: uiHist,
		Herder:    worker, Metrics: promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Version: buildinfo.Version, Commit: buildinfo.CommitID(),
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	say("rest api    %s (Kafka Connect dialect)", base)
	body, _ := json.Marshal(map[string]any{"name": "demo", "config": map[string]string{
		"connector.class":    "postgres",
		"topics":             demoTopic,
		"connection.url":     dbURL,
		"table.name.format":  table,
		"delivery.guarantee": "exactly_once",
		"pk.mode":            "kafka",
		"batch.linger.ms":    "20",
		"session.timeout.ms": "6000",
	}})
	res, err := http.Post(base+"/connectors", "application/json", bytes.NewReader(body))
	if err != nil {
		return verdict{}, fmt.Errorf("create the connector over REST: %w", err)
	}
	msg, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		return verdict{}, fmt.Errorf("create the connector over REST: %s: %s", res.Status, msg)
	}
	say("connector   POST %s/connectors -> %s: demo, %s -> %s, delivery.guarantee=exactly_once", base, res.Status, demoTopic, table)

	// Progress until the producer is done and the sink caught up.
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	producerDone := false
	var rows int64
	for {
		select {
		case <-ctx.Done():
			return verdict{}, fmt.Errorf("stopped before the sink caught up: %w", ctx.Err())
		case <-deadline:
			return verdict{}, fmt.Errorf("the sink did not catch up within -timeout %v", o.timeout)
		case err := <-prodErr:
			if err != nil {
				return verdict{}, fmt.Errorf("upstream producer: %w", err)
			}
			producerDone = true
		case <-tick.C:
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&rows); err != nil {
			return verdict{}, err
		}
		mu.Lock()
		nc := int64(len(committed))
		mu.Unlock()
		line := fmt.Sprintf("progress    produced %6d  committed upstream %6d  aborted upstream %6d  rows in sink %6d  lag %6d",
			produced.Load(), nc, aborted.Load(), rows, nc-rows)
		if o.nonInteractive {
			say("%s", line)
		} else {
			fmt.Fprintf(out, "\r%s", line)
		}
		if producerDone && rows >= nc {
			break
		}
	}
	if !o.nonInteractive {
		fmt.Fprintln(out)
	}
	time.Sleep(200 * time.Millisecond) // a wrong extra round would show up now

	v, err := demoCheck(ctx, pool, table, committed)
	if err != nil {
		return v, err
	}
	v.aborted = int(aborted.Load())
	if v.exact() {
		say("verdict     EXACT: %d committed records, each exactly once; none of the %d aborted records (%.1fs)", v.committed, v.aborted, time.Since(start).Seconds())
	} else {
		say("verdict     NOT EXACT: %d rows for %d committed records: %d missing, %d duplicated, %d from aborted transactions",
			v.rows, v.committed, v.missing, v.duplicated, v.unexpected)
	}
	if o.nonInteractive || ctx.Err() != nil {
		// The services end with this process: no commands to try on them.
		say("")
		say("the demo's Kafka, PostgreSQL and worker stopped with it; on a terminal, txsink demo keeps them up until Ctrl-C")
		return v, nil
	}
	say("")
	say("look around:")
	say("  open %s/ui                          # status page: tasks, partitions, rate and lag charts", base)
	say("  txsink connectors -url %s status demo", base)
	say("  curl -s %s/connectors/demo/status     # partitions, next_offset, lag, in-doubt batches", base)
	say("  curl -s %s/metrics | grep ^txsink_", base)
	say("  txsink connectors -url %s stop demo && txsink connectors -url %s offsets demo", base, base)
	say("")
	say("the demo keeps running; press Ctrl-C to stop it and remove everything it created")
	<-ctx.Done()
	return v, nil
}

func demoProduce(ctx context.Context, addrs []string, o demoOptions, committed map[[2]int64]string, mu *sync.Mutex, produced, aborted *atomic.Int64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID("demo-producer"), kgo.DefaultProduceTopic(demoTopic))
	if err != nil {
		return err
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	seq := 0
	for {
		mu.Lock()
		n := len(committed)
		mu.Unlock()
		if n >= o.records {
			return nil
		}
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		var recs []*kgo.Record
		for i := 0; i < 1+rng.IntN(200); i++ {
			seq++
			v, _ := json.Marshal(map[string]any{
				"order_id":  fmt.Sprintf("o-%07d", seq),
				"amount":    fmt.Sprintf("%d.%02d", rng.IntN(500), rng.IntN(100)),
				"placed_at": time.Now().UTC().Format(time.RFC3339Nano),
			})
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("c-%d", rng.IntN(1000))), Value: v})
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			return err
		}
		abort := rng.Float64() < o.abortRatio
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			return err
		}
		produced.Add(int64(len(recs)))
		if abort {
			aborted.Add(int64(len(recs)))
			continue
		}
		mu.Lock()
		for _, r := range recs {
			var v struct {
				OrderID string `json:"order_id"`
			}
			_ = json.Unmarshal(r.Value, &v)
			committed[[2]int64{int64(r.Partition), r.Offset}] = v.OrderID
		}
		mu.Unlock()
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
	}
}

// demoCheck compares the table with the producer's committed records by
// Kafka coordinates and order id.
func demoCheck(ctx context.Context, pool *pgxpool.Pool, table string, committed map[[2]int64]string) (verdict, error) {
	rows, err := pool.Query(ctx, `SELECT __connect_partition, __connect_offset, order_id FROM `+table)
	if err != nil {
		return verdict{}, err
	}
	defer rows.Close()
	v := verdict{committed: len(committed)}
	seen := map[[2]int64]int{}
	for rows.Next() {
		var p int32
		var off int64
		var id string
		if err := rows.Scan(&p, &off, &id); err != nil {
			return v, err
		}
		v.rows++
		k := [2]int64{int64(p), off}
		seen[k]++
		if want, ok := committed[k]; !ok || want != id {
			v.unexpected++
		}
	}
	if err := rows.Err(); err != nil {
		return v, err
	}
	for k := range committed {
		switch n := seen[k]; {
		case n == 0:
			v.missing++
		case n > 1:
			v.duplicated += n - 1
		}
	}
	return v, nil
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}

// isTerminal reports whether w is a terminal (an interactive run).
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}
