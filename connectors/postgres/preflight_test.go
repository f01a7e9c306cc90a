//go:build dbtest

package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/internal/pgtest"
)

// TestPreflight runs on real PostgreSQL servers: one with PostgreSQL's
// default max_prepared_transactions = 0, which must refuse exactly_once and
// say what to change, and accept exactly_once_sink; one with prepared
// transactions, which accepts both.
func TestPreflight(t *testing.T) {
	ctx := context.Background()
	open := func(t *testing.T, url string) connectors.Sink {
		raw := map[string]string{"name": "pf", "connector.class": "postgres", "topics": "t", "connection.url": url}
		reg := &connectors.Registry{}
		if err := reg.Register(Spec()); err != nil {
			t.Fatal(err)
		}
		spec, v, errs := reg.Validate(raw)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		s, err := spec.New(ctx, connectors.Env{}, config.ParseConnector(v), v)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	t.Run("max_prepared_transactions=0", func(t *testing.T) {
		srv := pgtest.StartWith(t, pgtest.Options{NoPreparedTransactions: true})
		s := open(t, srv.NewDatabase(t))
		err := s.Preflight(ctx, connectors.TwoPhase)
		if err == nil {
			t.Fatal("preflight accepted exactly_once on a server without prepared transactions")
		}
		for _, want := range []string{"max_prepared_transactions", "exactly_once_sink"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("preflight error does not say %q: %v", want, err)
			}
		}
		if err := s.Preflight(ctx, connectors.SinkCAS); err != nil {
			t.Errorf("exactly_once_sink refused: %v", err)
		}
	})
	t.Run("max_prepared_transactions=64", func(t *testing.T) {
		srv := pgtest.Start(t)
		s := open(t, srv.NewDatabase(t))
		for _, mode := range []connectors.Guarantee{connectors.TwoPhase, connectors.SinkCAS, connectors.AtLeastOnce, connectors.AtMostOnce} {
			if err := s.Preflight(ctx, mode); err != nil {
				t.Errorf("%s refused: %v", mode, err)
			}
		}
	})
}
