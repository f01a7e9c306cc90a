// Package pgtest starts throwaway PostgreSQL clusters from the local server
// binaries for tests that need a real database.
//
// A cluster lives in a temporary directory, listens on a free port on
// 127.0.0.1 (and on a Unix socket in its directory), runs with
// max_prepared_transactions=64 so two-phase commit works, and trades
// durability for speed (fsync=off). Tests skip, with the reason, when the
// binaries (initdb, pg_ctl) cannot be found.
//
// Two ways to use it:
//
//	func TestX(t *testing.T) {
//		srv := pgtest.Start(t) // one cluster for this test, stopped in t.Cleanup
//		url := srv.NewDatabase(t)
//		...
//	}
//
// or one cluster per test binary, started on first use:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.RunMain(m)) }
//
//	func TestY(t *testing.T) {
//		url := pgtest.Shared(t).NewDatabase(t)
//		...
//	}
//
// When the test process runs as root (containers, CI), the cluster runs as an
// unprivileged user ("postgres" if it exists, else "nobody"), because initdb
// and postgres refuse to run as root.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txsink/txsink/internal/pglocal"
)

// ErrNoBinaries is returned (and turned into a test skip) when initdb and
// pg_ctl cannot be found.
var ErrNoBinaries = pglocal.ErrNoBinaries

// Options change the throwaway cluster's settings.
type Options = pglocal.Options

// Server is a running throwaway cluster.
type Server struct {
	*pglocal.Server
}

// Start starts a cluster in t.TempDir() and stops it (pg_ctl stop -m
// immediate) in t.Cleanup. It calls t.Skip when the server binaries are
// missing and t.Fatal on any other failure.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	srv, err := pglocal.Start(t.TempDir(), o)
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return &Server{srv}
}

// StartMain starts a cluster that is not tied to a test, for TestMain or
// benchmark harnesses. The caller must call Stop, which also removes the
// cluster's directory.
func StartMain() (*Server, error) {
	srv, err := pglocal.StartTemp(Options{})
	if err != nil {
		return nil, err
	}
	return &Server{srv}, nil
}

var shared struct {
	mu      sync.Mutex
	started bool
	srv     *Server
	err     error
	inMain  bool
}

// RunMain runs the tests of m and then stops the cluster Shared started, if
// any. Use it as os.Exit(pgtest.RunMain(m)) in TestMain.
func RunMain(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()
	code := m.Run()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Shared returns the test binary's shared cluster, starting it on first use.
// It requires TestMain to call RunMain (which stops the cluster) and falls
// back to Start(t) otherwise. It skips the test when the binaries are
// missing.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.inMain {
		return Start(t)
	}
	if !shared.started {
		shared.started = true
		shared.srv, shared.err = StartMain()
	}
	if errors.Is(shared.err, ErrNoBinaries) {
		t.Skip(shared.err.Error())
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates an empty database named after the test and returns
// its URL. Databases are not dropped: they disappear with the cluster.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = fmt.Sprintf("t%d_%s", s.NextDatabaseSeq(), name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url, err := s.CreateDatabase(ctx, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return url
}
