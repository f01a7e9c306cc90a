package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/txsink/txsink/api"
	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/config/providers"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/internal/buildinfo"
)

type connectorFiles []string

func (c *connectorFiles) String() string     { return strings.Join(*c, ",") }
func (c *connectorFiles) Set(v string) error { *c = append(*c, v); return nil }

// serveFlags maps the serve flags to worker settings; a flag given on the
// command line overrides the environment and the worker file.
var serveFlags = map[string]string{
	"listen":     config.KeyWorkerListen,
	"bootstrap":  config.KeyWorkerBootstrap,
	"worker-id":  config.KeyWorkerID,
	"data-dir":   config.KeyWorkerDataDir,
	"log-format": config.KeyWorkerLogFormat,
	"log-level":  config.KeyWorkerLogLevel,
}

func cmdServe(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	wf := registerWorkerFlags(fs, "config", serveFlags)
	var files connectorFiles
	fs.Var(&files, "connector", "connector config file (JSON) created at start if no connector of that name exists; repeatable")
	unsafeTest := fs.Bool(unsafeTestFlag, false, unsafeTestDoc)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	wc, err := wf.load()
	if err == nil && wc.Cluster.Enabled && len(files) > 0 {
		err = fmt.Errorf("-connector: in distributed mode (group.id) connectors are created through the REST API, which stores them in the config topic")
	}
	if err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitUsage
	}

	// Every log line goes through the secret scrubber, then the named
	// levels of /admin/loggers.
	var worker serveHerder
	rt, err := newWorkerRuntime(wc, stderr, func() []string {
		if worker == nil {
			return nil
		}
		return worker.Secrets()
	})
	if err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitUsage
	}
	log := rt.logger("txsink")
	tlsCfg, err := wc.TLSConfig()
	if err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitUsage
	}
	if err := rt.checkKafka(context.Background(), log); err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitStartFail
	}
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg := registry()
	reg.SetPolicy(connectors.Policy{
		UnixSockets:        wc.Connections.UnixSockets,
		EnvCredentialHosts: wc.Connections.EnvCredentialHosts,
		UnsafeTestSettings: *unsafeTest,
		ReservedTopics:     wc.Cluster.Topics(),
		Registry:           registryPolicy(wc),
	})
	if *unsafeTest {
		log.Warn("started with -" + unsafeTestFlag + ": connectors may switch off exactly-once safeguards; never do this in production")
	}
	ln, err := net.Listen("tcp", wc.Listen)
	if err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitStartFail
	}
	defer ln.Close()
	hostname, _ := os.Hostname()
	advertised := wc.AdvertisedID(ln.Addr(), hostname)
	resolver, err := providers.New(wc.Providers)
	if err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitUsage
	}
	engOpt := engine.Options{
		WorkerID:     wc.WorkerID,
		AdvertisedID: advertised,
		Bootstrap:    wc.Bootstrap,
		KafkaOpts:    rt.kafkaOpts,
		Log:          rt.logger("txsink.worker"),
		ConnectorLog: func(name string) *slog.Logger {
			return rt.logger("txsink.connectors." + name)
		},
		Restart:    engine.RestartPolicy{Enabled: wc.RestartEnabled, Initial: wc.RestartInitial, Max: wc.RestartMax},
		Registerer: promReg,
		Memory:     engine.NewMemory(wc.MemoryBudget, rt.logger("txsink.worker")),
	}
	if resolver != nil {
		engOpt.Resolve = resolver.Resolve
	}
	var cl clusterWiring
	if wc.Cluster.Enabled {
		cl, err = newDistributed(wc, advertised, tlsCfg, reg, resolver, engOpt)
		if err == nil {
			worker = cl.herder
		}
	} else {
		worker, err = herder.NewStandalone(reg, herder.StandaloneOptions{DataDir: wc.DataDir, Engine: engOpt})
	}
	if err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitStartFail
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	auth := api.Auth{BasicUser: wc.REST.BasicUser, BasicPassword: wc.REST.BasicPassword, BearerToken: wc.REST.BearerToken}
	if !auth.Enabled() && !isLoopback(ln.Addr()) {
		log.Warn("the REST API listens beyond the loopback interface without authentication; set rest.auth.basic.user/password or rest.auth.bearer.token", "addr", ln.Addr().String())
	}
	scheme := "http"
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
		scheme = "https"
	}
	// What /ui draws over time: sampled from the worker's status while it
	// runs, stopped before the worker closes.
	uiHist := api.NewUIHistory(worker, api.DefaultUIHistoryEvery, api.DefaultUIHistoryKeep, rt.logger("txsink.api"))
	hctx, hcancel := context.WithCancel(ctx)
	hdone := make(chan struct{})
	go func() { defer close(hdone); uiHist.Run(hctx) }()
	stopHistory := func() { hcancel(); <-hdone }
	defer stopHistory()
	router := api.New(api.Options{
		UIHistory:         uiHist,
		Herder:            worker,
		Levels:            rt.levels,
		Metrics:           promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}),
		Log:               rt.logger("txsink.api"),
		Auth:              auth,
		MaxBodyBytes:      wc.REST.MaxBodyBytes,
		Listen:            wc.Listen,
		AllowedHosts:      append(wc.REST.AllowedHosts, cl.allowedHosts...),
		AllowOrigin:       wc.REST.AllowOrigin,
		AllowMethods:      wc.REST.AllowMethods,
		RequireClientCert: wc.REST.ClientCA != "",
		Version:           buildinfo.Version,
		Commit:            buildinfo.CommitID(),
		Forward:           cl.forward,
	})
	srv := &http.Server{
		Handler: router, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute,
		// The server's own messages (TLS handshake errors, for one) go
		// through the worker's log handler too: its format, its scrubber.
		ErrorLog: slog.NewLogLogger(rt.logger("txsink.api.http").Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	code := exitOK
	if wc.Cluster.Enabled {
		log.Info("worker listening", "url", scheme+"://"+ln.Addr().String(), "worker_id", advertised, "advertised_url", cl.url, "group", wc.Cluster.GroupID)
		if len(wc.Cluster.IgnoredOffsetSettings) > 0 {
			log.Info("offset storage settings are ignored: txsink keeps every partition's progress in the sink", "settings", wc.Cluster.IgnoredOffsetSettings)
		}
		if err := worker.Start(ctx); err != nil {
			log.Error("the worker cannot join the cluster", "err", err)
			code = exitStartFail
			stop()
		}
	} else {
		log.Info("worker listening", "url", scheme+"://"+ln.Addr().String(), "advertised_id", advertised, "worker_id", wc.WorkerID, "data_dir", wc.DataDir)
		if err := worker.Start(ctx); err != nil {
			log.Error("worker state cannot be written", "err", err)
		}
	}
	for _, f := range files {
		raw, err := readConnectorFile(f)
		if err != nil {
			fmt.Fprintln(stderr, "txsink serve:", err)
			code = exitUsage
			stop()
			break
		}
		name := strings.TrimSpace(raw[config.KeyName])
		if _, err := worker.Info(ctx, name); err == nil {
			log.Info("connector from file already exists; keeping the stored one", "connector", name, "file", f)
			continue
		}
		if _, err := worker.Create(ctx, name, raw, engine.TargetRunning); err != nil {
			fmt.Fprintf(stderr, "txsink serve: connector from %s: %s\n", f, secrets.ScrubString(err.Error(), secrets.Of(worker.Registry(), raw)))
			code = exitStartFail
			stop()
			break
		}
	}
	names, _ := worker.Connectors(ctx)
	log.Info("worker started", "connectors", len(names))

	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server failed", "err", err)
			code = exitStartFail
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	stopHistory()
	worker.Close()
	log.Info("worker stopped")
	return code
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
