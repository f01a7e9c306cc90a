// Command txsink is the txsink service: it consumes Kafka topics with
// read_committed isolation and writes them to PostgreSQL exactly once.
//
//	txsink version                      print version and commit
//	txsink run -config c.json ...       run one connector in the foreground
//	txsink serve ...                    run the worker with its REST API
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/clickhouse"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/postgres"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/internal/buildinfo"
	"github.com/txsink/txsink/offsets"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: txsink <command> [flags]

commands:
  demo      run the main job on embedded services (in-process Kafka, a
            throwaway PostgreSQL) and print the exactly-once verdict
  version   print the version and commit
  run       run one connector in the foreground until SIGTERM or SIGINT
  verify    audit a sink against Kafka: loss, duplicates, aborted reads
            (see docs/verify.md)
  serve     run the worker: the REST API (Kafka Connect dialect) on -listen,
            connectors created over REST or given with -connector

run "txsink <command> -h" for the flags of a command.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "txsink %s (commit %s)\n", buildinfo.Version, buildinfo.CommitID())
		return 0
	case "run":
		return cmdRun(args[1:], stderr)
	case "demo":
		return cmdDemo(args[1:], stdout, stderr)
	case "serve":
		return cmdServe(args[1:], stderr)
	case "healthcheck":
		return cmdHealthcheck(args[1:], stdout, stderr)
	case "connectors":
		return cmdConnectors(args[1:], stdout, stderr)
	case "config-docs":
		return cmdConfigDocs(args[1:], stdout, stderr)
	case "verify":
		return cmdVerify(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "txsink: unknown command %q\n\n%s", args[0], usage)
	return 2
}

func registry() *connectors.Registry {
	reg := &connectors.Registry{}
	for _, spec := range []connectors.Spec{postgres.Spec(), clickhouse.Spec()} {
		if err := reg.Register(spec); err != nil {
			panic(err) // programming error: a duplicate or invalid spec
		}
	}
	return reg
}

// unsafeTestFlag is the command-line flag of "run" and "serve" that lets
// connectors use test-only switches (txsink.test.unsafe.disable.fencing,
// txsink.test.unsafe.disable.recovery).
// It is a flag only: no configuration file or environment variable sets
// it.
const (
	unsafeTestFlag = "allow-unsafe-test-settings"
	unsafeTestDoc  = "TEST ONLY: accept test-only connector settings that switch off exactly-once safeguards (txsink.test.unsafe.disable.fencing, txsink.test.unsafe.disable.recovery); without it they are refused"
)

func defaultWorkerID() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return engine.NewInstanceID()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// readConnectorFile reads a connector config in Kafka Connect's create
// shape ({"name": …, "config": {…}}) or as a flat object of settings.
func readConnectorFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var wrapped struct {
		Name   string            `json:"name"`
		Config map[string]string `json:"config"`
	}
	if err := json.Unmarshal(b, &wrapped); err == nil && wrapped.Config != nil {
		if wrapped.Config["name"] == "" {
			wrapped.Config["name"] = wrapped.Name
		}
		return wrapped.Config, nil
	}
	var flat map[string]string
	if err := json.Unmarshal(b, &flat); err != nil {
		return nil, fmt.Errorf("%s: not a connector config (want {\"name\":…,\"config\":{…}} or an object of string settings): %w", path, err)
	}
	return flat, nil
}

// Exit codes of "txsink run".
const (
	exitOK         = 0
	exitUsage      = 2
	exitStartFail  = 3
	exitTaskFailed = 4
)

func cmdRun(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wf := registerWorkerFlags(fs, "worker-config", commonWorkerFlags)
	cfgPath := fs.String("config", "", "connector config file (JSON)")
	unsafeTest := fs.Bool(unsafeTestFlag, false, unsafeTestDoc)
	progressEvery := fs.Duration("progress-interval", defaultProgressInterval, "log a progress line (records, rate, lag) this often; 0 for none")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *progressEvery < 0 {
		fmt.Fprintln(stderr, "txsink run: -progress-interval must not be negative")
		return exitUsage
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, "txsink run: -config is required")
		return exitUsage
	}
	wc, err := wf.load()
	if err != nil {
		fmt.Fprintln(stderr, "txsink run:", err)
		return exitUsage
	}
	raw, err := readConnectorFile(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "txsink run:", err)
		return exitUsage
	}
	// The connector comes from a file only the operator writes, not from a
	// REST client: it may use Unix sockets and the environment's
	// credentials (see docs/security.md).
	reg := registry()
	reg.SetPolicy(connectors.Policy{UnixSockets: true, EnvCredentialHosts: []string{"*"}, UnsafeTestSettings: *unsafeTest, Registry: registryPolicy(wc)})
	connSecrets := secrets.Of(reg, raw)
	rt, err := newWorkerRuntime(wc, stderr, func() []string { return connSecrets })
	if err != nil {
		fmt.Fprintln(stderr, "txsink run:", err)
		return exitUsage
	}
	log := rt.logger("txsink")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := rt.checkKafka(ctx, log); err != nil {
		fmt.Fprintln(stderr, "txsink run:", err)
		return exitStartFail
	}
	opt := engine.TaskOptions{
		Bootstrap:  wc.Bootstrap,
		KafkaOpts:  rt.kafkaOpts,
		InstanceID: wc.WorkerID,
		Log:        rt.logger("txsink.connectors." + raw[config.KeyName]),
		Memory:     engine.NewMemory(wc.MemoryBudget, log),
	}
	progress := newRunProgress()
	if *progressEvery > 0 {
		opt.Observer = progress
	}
	c, err := openWithRetry(ctx, reg, raw, opt, log)
	if err != nil {
		fmt.Fprintln(stderr, "txsink run:", err)
		return exitStartFail
	}
	done := make(chan struct{})
	remaining := c.Config.TasksMax
	exited := make(chan struct{}, remaining)
	c.Start(func(int, error) { exited <- struct{}{} })
	go func() {
		for i := 0; i < remaining; i++ {
			<-exited
		}
		close(done)
	}()
	log.Info("connector running", "connector", c.Config.Name, "delivery", c.Config.Delivery, "tasks", c.Config.TasksMax)
	if *progressEvery > 0 {
		lag := func(context.Context, []offsets.Position) (int64, int) { return 0, 0 }
		if cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(wc.Bootstrap...), kgo.ClientID("txsink-run-progress")}, rt.kafkaOpts...)...); err == nil {
			defer cl.Close() // after the progress goroutine ended (deferred below, so run before)
			lag = engine.NewLagReader(cl, log).Lag
		}
		pctx, pcancel := context.WithCancel(ctx)
		pdone := make(chan struct{})
		defer func() { pcancel(); <-pdone }()
		go func() {
			defer close(pdone)
			logProgress(pctx, log.With("connector", c.Config.Name), progress, lag, *progressEvery)
		}()
	}
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case <-done:
	}
	c.Stop()
	if err := c.Wait(); err != nil {
		fmt.Fprintln(stderr, "txsink run: connector failed:", err)
		if errors.Is(err, engine.ErrTaskStopped) {
			return exitTaskFailed
		}
		return exitTaskFailed
	}
	return exitOK
}

// startupRetry bounds how long "txsink run" keeps trying to reach a sink
// that is not accepting connections yet (a database in crash recovery, a
// server still starting) before it gives up with exit code 3.
const startupRetry = 60 * time.Second

// openWithRetry opens the connector, retrying for up to startupRetry while
// the failure is a connection the sink may accept soon; configuration and
// preflight errors fail at once.
func openWithRetry(ctx context.Context, reg *connectors.Registry, raw map[string]string, opt engine.TaskOptions, log *slog.Logger) (*engine.Connector, error) {
	deadline := time.Now().Add(startupRetry)
	wait := 250 * time.Millisecond
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, err := engine.Open(octx, reg, raw, opt)
		cancel()
		if err == nil || !transientOpenError(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return c, err
		}
		log.Warn("sink not reachable yet; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// transientOpenError reports connection failures worth retrying at start.
func transientOpenError(err error) bool {
	var ne net.Error
	return postgres.IsRetryable(err) || errors.As(err, &ne)
}
