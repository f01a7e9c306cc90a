// Command prefetch resolves, with Maven, every Kafka Connect class path the
// tests and the benchmark run (connectpeer.Prepare's peer with Debezium's
// JDBC sink, PrepareWorker's plain worker, and Debezium's PostgreSQL
// source connector as a plugin) into their cache, so that no test waits
// for the downloads and no two test processes resolve the same one at
// once. .ci/run runs it in the background while the stand-in images
// build:
//
//	go run ./internal/connectpeer/prefetch
//
// It must run from the repository root. A cached class path takes no
// time; one that is missing costs a Maven download.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/txsink/txsink/internal/connectpeer"
)

func main() {
	ctx := context.Background()
	steps := []struct {
		name string
		run  func() (string, error)
	}{
		{"Connect peer (bench/peer/pom.xml)", func() (string, error) {
			p, err := connectpeer.Prepare(ctx, ".")
			if err != nil {
				return "", err
			}
			return p.Libs, nil
		}},
		{"Connect worker (internal/connectpeer/worker/pom.xml)", func() (string, error) {
			p, err := connectpeer.PrepareWorker(ctx, ".")
			if err != nil {
				return "", err
			}
			return p.Libs, nil
		}},
		{"Debezium PostgreSQL plugin (deploy/debezium/pom.xml)", func() (string, error) {
			return connectpeer.ResolvePlugin(ctx, filepath.Join("deploy", "debezium", "pom.xml"), "debezium-postgres")
		}},
	}
	for _, s := range steps {
		start := time.Now()
		dir, err := s.run()
		if err != nil {
			fmt.Fprintf(os.Stderr, "prefetch: %s: %v\n", s.name, err)
			os.Exit(1)
		}
		fmt.Printf("%s: %s (%.1fs)\n", s.name, dir, time.Since(start).Seconds())
	}
}
