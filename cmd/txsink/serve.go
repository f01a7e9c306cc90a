package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/internal/buildinfo"
)

type connectorFiles []string

func (c *connectorFiles) String() string     { return strings.Join(*c, ",") }
func (c *connectorFiles) Set(v string) error { *c = append(*c, v); return nil }

func cmdServe(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf commonFlags
	cf.register(fs)
	listen := fs.String("listen", envOr("TXSINK_LISTEN", "127.0.0.1:8083"), "HTTP listen address (env TXSINK_LISTEN)")
	var files connectorFiles
	fs.Var(&files, "connector", "connector config file (JSON); repeatable")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	log, err := cf.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	reg := registry()
	var running []*connectors.Connector
	healthy := true
	for _, f := range files {
		raw, err := readConnectorFile(f)
		if err != nil {
			fmt.Fprintln(stderr, "txsink serve:", err)
			return exitUsage
		}
		c, err := connectors.Open(ctx, reg, raw, cf.taskOptions(log))
		if err != nil {
			fmt.Fprintf(stderr, "txsink serve: connector from %s: %v\n", f, err)
			return exitStartFail
		}
		c.Start(func(task int, err error) {
			if err != nil {
				healthy = false
			}
		})
		running = append(running, c)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"version": buildinfo.Version, "commit": buildinfo.CommitID(), "kafka_cluster_id": ""})
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"unhealthy","message":"a connector task failed; see the logs"}`)
			return
		}
		_, _ = io.WriteString(w, `{"status":"healthy","message":"Worker has completed startup and is ready to handle requests."}`)
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(stderr, "txsink serve:", err)
		return exitStartFail
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("worker listening", "addr", ln.Addr().String(), "connectors", len(running))
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	for _, c := range running {
		c.Stop()
	}
	return exitOK
}
