package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/api"
	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/convert"
)

// workerFlags are the worker settings "run", "serve" and "verify" read the
// same way: defaults, then a worker file (JSON or Java properties), then
// the environment (TXSINK_<SETTING>), then the command-line flags that name
// a setting. So the Kafka security settings (kafka.security.protocol,
// kafka.sasl.*, kafka.ssl.*) reach all three commands alike.
type workerFlags struct {
	fs    *flag.FlagSet
	file  *string
	names map[string]string // flag name -> worker setting
}

// Flags shared by every command that runs Kafka clients for a worker.
var commonWorkerFlags = map[string]string{
	"bootstrap":  config.KeyWorkerBootstrap,
	"worker-id":  config.KeyWorkerID,
	"log-format": config.KeyWorkerLogFormat,
	"log-level":  config.KeyWorkerLogLevel,
}

// registerWorkerFlags adds to fs the worker-file flag fileFlag and one
// string flag per setting of names (flag name -> setting), documented from
// the setting's definition.
func registerWorkerFlags(fs *flag.FlagSet, fileFlag string, names map[string]string) *workerFlags {
	w := &workerFlags{fs: fs, names: names}
	w.file = fs.String(fileFlag, os.Getenv("TXSINK_CONFIG"), "worker config file, JSON object or Java properties (env TXSINK_CONFIG): Kafka security (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*) and the other worker settings of docs/configuration.md; each setting is also read from TXSINK_<SETTING>")
	flagNames := make([]string, 0, len(names))
	for n := range names {
		flagNames = append(flagNames, n)
	}
	sort.Strings(flagNames)
	for _, n := range flagNames {
		key := names[n]
		d, _ := config.WorkerDefs.Lookup(key)
		fs.String(n, "", fmt.Sprintf("%s (worker setting %s, env %s; default %q)", d.Doc, key, config.EnvKey(key), d.Default))
	}
	return w
}

// load merges the settings (flags given on the command line win) and
// validates them; errors name the setting.
func (w *workerFlags) load() (config.Worker, error) {
	overrides := map[string]string{}
	w.fs.Visit(func(f *flag.Flag) {
		if key, ok := w.names[f.Name]; ok {
			overrides[key] = f.Value.String()
		}
	})
	wc, err := config.LoadWorker(*w.file, os.LookupEnv, overrides)
	if err != nil {
		return wc, err
	}
	if wc.WorkerID == "" && !wc.Cluster.Enabled {
		// In distributed mode the id is the advertised REST address.
		wc.WorkerID = defaultWorkerID()
	}
	return wc, nil
}

// workerRuntime is what "run" and "serve" build from the worker settings,
// through this one code path: the log handler chain (format, secret
// scrubber, the named levels of /admin/loggers) and the Kafka client
// options (TLS, SASL).
type workerRuntime struct {
	cfg       config.Worker
	base      slog.Handler
	levels    *api.Levels
	kafkaOpts []kgo.Opt
}

// newWorkerRuntime builds the runtime of wc, logging to w. The scrubber
// hides the worker's own secrets (the SASL password, the REST credentials)
// and the strings secrets returns (connector passwords; it may return nil)
// in every log line.
func newWorkerRuntime(wc config.Worker, w io.Writer, secrets func() []string) (*workerRuntime, error) {
	root, err := api.ParseLevel(wc.LogLevel)
	if err != nil {
		return nil, err
	}
	ho := &slog.HandlerOptions{Level: api.LevelTrace}
	var base slog.Handler = slog.NewTextHandler(w, ho)
	if wc.LogFormat == "json" {
		base = slog.NewJSONHandler(w, ho)
	}
	kopts, err := wc.KafkaOpts()
	if err != nil {
		return nil, err
	}
	return &workerRuntime{
		cfg:       wc,
		base:      api.NewScrubHandler(base, func() []string { return append(workerSecrets(wc), secrets()...) }),
		levels:    api.NewLevels(root),
		kafkaOpts: kopts,
	}, nil
}

// logger returns the named logger ("txsink", "txsink.connectors.<name>").
func (r *workerRuntime) logger(name string) *slog.Logger {
	return r.levels.Logger(r.base, name)
}

// kafkaProbeTimeout bounds the start-up check of the Kafka connection.
const kafkaProbeTimeout = 15 * time.Second

// checkKafka asks the brokers for their metadata with the worker's Kafka
// client options. A failure the security settings explain (refused SASL
// credentials, a certificate that does not verify, a broker that wants a
// client certificate) is returned as a *config.KafkaConnError naming the
// setting: the caller stops with it. Any other failure (a broker not up
// yet) is only logged: the clients keep retrying.
func (r *workerRuntime) checkKafka(ctx context.Context, log *slog.Logger) error {
	err := probeKafka(ctx, r.cfg.Bootstrap, r.kafkaOpts)
	if err == nil {
		return nil
	}
	if ke := r.cfg.ExplainKafkaError(err); ke != err {
		return ke
	}
	log.Warn("Kafka not reachable yet; the clients keep retrying", "bootstrap", r.cfg.Bootstrap, "err", err)
	return nil
}

// probeKafka lists the brokers once, within kafkaProbeTimeout.
func probeKafka(ctx context.Context, bootstrap []string, opts []kgo.Opt) error {
	ctx, cancel := context.WithTimeout(ctx, kafkaProbeTimeout)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrap...), kgo.ClientID("txsink-probe")}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = kadm.NewClient(cl).ListBrokers(ctx)
	return err
}

// workerSecrets returns the worker settings' secrets that are set (of three
// characters or more, as connectors.Secrets: shorter ones would mangle
// unrelated text).
func workerSecrets(wc config.Worker) []string {
	var out []string
	for _, s := range []string{wc.Kafka.Password, wc.REST.BasicPassword, wc.REST.BearerToken} {
		if len(s) >= 3 {
			out = append(out, s)
		}
	}
	return out
}

// registryPolicy is what the worker settings let the converters' Schema
// Registry clients do (schema.registry.*).
func registryPolicy(wc config.Worker) convert.RegistryPolicy {
	return convert.RegistryPolicy{
		AllowedHosts:     wc.Connections.RegistryHosts,
		MaxResponseBytes: wc.Connections.RegistryMaxResponse,
		Timeout:          wc.Connections.RegistryTimeout,
	}
}
