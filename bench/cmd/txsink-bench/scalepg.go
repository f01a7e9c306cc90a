package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/moby/moby/api/types/container"
	dockernetwork "github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"

	"github.com/txsink/txsink/integration/harness"
)

// The scale rows' PostgreSQL: the harness's image with the harness's
// settings (fsync on), but sized for a worker of many partitions and
// connectors. The harness's server (max_connections=200,
// max_prepared_transactions=64) refuses 100 connectors at the default
// connection.pool.size (16) and exactly_once on more than 64 partitions
// of one worker (a prepared transaction per partition batch of a round).
const (
	scaleMaxConnections = 2000
	scaleMaxPrepared    = 2200
)

// scaleDB is the scale rows' database.
type scaleDB struct {
	url         string
	pool        *pgxpool.Pool
	maxPrepared int
}

// startScalePostgres starts the scale rows' server, published on
// 127.0.0.1 only and labelled as the harness labels its containers
// (io.txsink.test), and terminated by the bench's cleanups.
func (b *bench) startScalePostgres(ctx context.Context) (*scaleDB, error) {
	image := envOr(harness.EnvPostgresImage, harness.DefaultPostgresImage)
	port, err := harness.FreePort()
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"io.txsink.test": "bench-scale-postgres"}
	if id := os.Getenv("TXSINK_TEST_RUN_ID"); id != "" {
		labels["io.txsink.test.run"] = id
	}
	p, err := dockernetwork.ParsePort("5432/tcp")
	if err != nil {
		return nil, err
	}
	req := testcontainers.ContainerRequest{
		Image:        image,
		Env:          map[string]string{"POSTGRES_USER": "postgres", "POSTGRES_PASSWORD": "txsink", "POSTGRES_DB": "postgres"},
		Cmd:          []string{"postgres", "-c", "fsync=on", "-c", "max_connections=" + strconv.Itoa(scaleMaxConnections), "-c", "max_prepared_transactions=" + strconv.Itoa(scaleMaxPrepared)},
		ExposedPorts: []string{"5432/tcp"},
		Labels:       labels,
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.PortBindings = dockernetwork.PortMap{p: {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(port)}}}
		},
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ctr, err := testcontainers.GenericContainer(sctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if ctr != nil {
		b.tb.Cleanup(func() {
			tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = ctr.Terminate(tctx)
		})
	}
	if err != nil {
		return nil, fmt.Errorf("scale rows' PostgreSQL from %s: %w", image, err)
	}
	db := &scaleDB{url: fmt.Sprintf("postgres://postgres:txsink@127.0.0.1:%d/postgres?sslmode=disable", port)}
	// The entry point starts a temporary server for its set-up first: the
	// real one answers once it also takes SHOW.
	for {
		if db.pool == nil {
			db.pool, _ = pgxpool.New(sctx, db.url)
		}
		if db.pool != nil {
			var v string
			if err := db.pool.QueryRow(sctx, "SHOW max_prepared_transactions").Scan(&v); err == nil && v == strconv.Itoa(scaleMaxPrepared) {
				db.maxPrepared = scaleMaxPrepared
				break
			}
		}
		select {
		case <-sctx.Done():
			return nil, fmt.Errorf("scale rows' PostgreSQL not ready: %w", sctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	b.tb.Cleanup(db.pool.Close)
	return db, nil
}

// connSampler samples the server's connections (pg_stat_activity) every
// 250 ms until stop, keeping the largest count.
type connSampler struct {
	stop func() int
}

func (db *scaleDB) sampleConns(ctx context.Context) *connSampler {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	peak := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			var n int
			if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'").Scan(&n); err == nil {
				mu.Lock()
				peak = max(peak, n)
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return &connSampler{stop: func() int {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return peak
	}}
}
