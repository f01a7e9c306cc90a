//go:build dbtest

package postgres

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/sinktest"
	"github.com/txsink/txsink/internal/pgtest"
)

// TestConformance runs the sink conformance suite on a real PostgreSQL:
// every case on a fresh database, every instance on its own pool.
func TestConformance(t *testing.T) {
	srv := pgtest.Start(t)
	sinktest.Conformance(t, func(t *testing.T) sinktest.Harness {
		url := srv.NewDatabase(t)
		admin, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(admin.Close)
		connector := fmt.Sprintf("conf-%08x", rand.Uint32())
		return sinktest.Harness{
			Connector: connector,
			Open: func(t *testing.T) connectors.Sink {
				pool, err := pgxpool.New(context.Background(), url)
				if err != nil {
					t.Fatal(err)
				}
				s, err := NewSink(context.Background(), pool, connector, mustWriter(t, WriterConfig{Connector: connector}), "public", "txsink_offsets", slog.New(slog.NewTextHandler(io.Discard, nil)))
				if err != nil {
					pool.Close()
					t.Fatal(err)
				}
				s.EnableStaging(2)
				// A round's batches in one transaction: at the default
				// commit.parallelism, the suite's rounds of two to four
				// batches would be prepared each alone (round.go).
				s.SetRoundParallelism(1)
				t.Cleanup(s.Close)
				return s
			},
			NewTopic: func(t *testing.T, _ int32) string {
				topic := fmt.Sprintf("ev_%08x", rand.Uint32())
				if _, err := admin.Exec(context.Background(), "CREATE TABLE "+pgx.Identifier{topic}.Sanitize()+" (id text)"); err != nil {
					t.Fatal(err)
				}
				return topic
			},
			IDs: func(t *testing.T, topic string) []string {
				rows, err := admin.Query(context.Background(), "SELECT id FROM "+pgx.Identifier{topic}.Sanitize())
				if err != nil {
					t.Fatal(err)
				}
				out, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				return out
			},
			Local:  sinktest.LocalModes,
			Stager: true,
		}
	})
}
