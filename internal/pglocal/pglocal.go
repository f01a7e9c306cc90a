// Package pglocal runs throwaway PostgreSQL clusters from the local server
// binaries (initdb, pg_ctl): for tests (through internal/pgtest) and for
// "txsink demo".
//
// A cluster lives in a temporary directory, listens on a free port on
// 127.0.0.1 (and on a Unix socket in its directory), runs with
// max_prepared_transactions=64 so two-phase commit works, and trades
// durability for speed (fsync=off). When the process runs as root
// (containers, CI), the cluster runs as an unprivileged user ("postgres" if
// it exists, else "nobody"), because initdb and postgres refuse root.
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned when initdb and
// pg_ctl cannot be found in PATH or under /usr/lib/postgresql/*/bin.
var ErrNoBinaries = errors.New("pglocal: PostgreSQL server binaries (initdb, pg_ctl) not found in PATH or /usr/lib/postgresql/*/bin")

// Server is a running throwaway cluster.
type Server struct {
	// URL connects to the "postgres" database as the superuser "postgres"
	// over TCP on 127.0.0.1, without password and without TLS.
	URL string
	// Host and Port are the TCP address the cluster listens on.
	Host string
	Port int
	// SocketDir is the directory holding the cluster's Unix socket.
	SocketDir string
	// DataDir is the cluster's data directory.
	DataDir string

	binDir    string
	cred      *syscall.Credential
	removeDir []string // directories Stop removes (only for StartMain clusters)
	stopOnce  sync.Once
	stopErr   error
	dbSeq     atomic.Int64

	maxPrepared int
}

// Options change the throwaway cluster's settings.
type Options struct {
	// NoPreparedTransactions starts the server with
	// max_prepared_transactions = 0, PostgreSQL's default, to test
	// refusals of two-phase commit.
	NoPreparedTransactions bool
}

// StartTemp starts a cluster in a new temporary directory. The caller must call Stop, which also removes the
// cluster's directory. It returns an error wrapping ErrNoBinaries when the
// binaries are missing.
func StartTemp(o Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	srv, err := Start(dir, o)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv.removeDir = append(srv.removeDir, dir)
	return srv, nil
}

// CreateDatabase creates an empty database and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return "", fmt.Errorf("pglocal: connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pglocal: create database %s: %w", name, err)
	}
	return s.DatabaseURL(name), nil
}

// NextDatabaseSeq returns a number unique within this server, for naming
// databases.
func (s *Server) NextDatabaseSeq() int64 { return s.dbSeq.Add(1) }

// DatabaseURL returns the URL of database db on this server.
func (s *Server) DatabaseURL(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), db)
}

// Stop stops the cluster immediately (pg_ctl stop -m immediate). It is safe
// to call more than once.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		out, err := s.command("pg_ctl", "stop", "-D", s.DataDir, "-m", "immediate", "-w", "-t", "60").CombinedOutput()
		if err != nil {
			s.stopErr = fmt.Errorf("pg_ctl stop: %v: %s", err, out)
		}
		for _, d := range s.removeDir {
			os.RemoveAll(d)
		}
	})
	return s.stopErr
}

// findBinDir returns the directory holding initdb and pg_ctl, preferring
// PATH, then the newest /usr/lib/postgresql/<version>/bin.
// FindBinaries returns the directory holding initdb and pg_ctl, or an
// error wrapping ErrNoBinaries.
func FindBinaries() (string, error) { return findBinDir() }

func findBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err != nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// command builds a server command running as the cluster's OS user.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	path := name
	if s.binDir != "" {
		if p := filepath.Join(s.binDir, name); fileExists(p) {
			path = p
		}
	}
	cmd := exec.Command(path, args...)
	cmd.Env = []string{"PATH=" + s.binDir + ":/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// unprivileged returns the credential to run the cluster with when the
// process is root, or nil when it is not.
func unprivileged() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
	}
	return nil, errors.New("pglocal: running as root and no unprivileged user (postgres, nobody) exists to run the cluster as")
}

// maxSocketPath is the usable length of sockaddr_un.sun_path on Linux.
const maxSocketPath = 107

// Start starts a cluster in dir (which must exist) and returns it running.
// Stop stops it.
func Start(dir string, o Options) (*Server, error) {
	binDir, err := findBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := unprivileged()
	if err != nil {
		return nil, err
	}
	s := &Server{binDir: binDir, cred: cred, Host: "127.0.0.1", DataDir: filepath.Join(dir, "data"), SocketDir: dir, maxPrepared: 64}
	if o.NoPreparedTransactions {
		s.maxPrepared = 0
	}

	if cred != nil {
		// The cluster user must reach dir: open the search bit on the
		// temporary ancestors (test temp dirs are 0700) and hand dir over.
		if err := openAncestors(dir); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pglocal: chown %s: %w", dir, err)
		}
	}
	if len(s.SocketDir)+len("/.s.PGSQL.65535") > maxSocketPath {
		sd, err := os.MkdirTemp("", "pgs")
		if err != nil {
			return nil, fmt.Errorf("pglocal: %w", err)
		}
		if cred != nil {
			if err := os.Chown(sd, int(cred.Uid), int(cred.Gid)); err != nil {
				os.RemoveAll(sd)
				return nil, fmt.Errorf("pglocal: chown %s: %w", sd, err)
			}
		}
		s.SocketDir = sd
		s.removeDir = append(s.removeDir, sd)
	}

	out, err := s.command("initdb", "-D", s.DataDir, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions").CombinedOutput()
	if err != nil {
		s.cleanupDirs()
		return nil, fmt.Errorf("pglocal: initdb: %v: %s", err, out)
	}

	// A free port can be taken between our probe and the server's bind:
	// retry with another one.
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		s.Port = port
		if err := s.writeConf(); err != nil {
			s.cleanupDirs()
			return nil, err
		}
		logFile := filepath.Join(dir, "postgres.log")
		out, err := s.command("pg_ctl", "start", "-D", s.DataDir, "-l", logFile, "-w", "-t", "60").CombinedOutput()
		if err == nil {
			s.URL = s.DatabaseURL("postgres")
			if err := s.ping(); err != nil {
				s.Stop()
				return nil, err
			}
			return s, nil
		}
		logText, _ := os.ReadFile(logFile)
		lastErr = fmt.Errorf("pglocal: pg_ctl start: %v: %s\n%s", err, out, tail(logText, 2000))
	}
	s.cleanupDirs()
	return nil, lastErr
}

func (s *Server) cleanupDirs() {
	for _, d := range s.removeDir {
		os.RemoveAll(d)
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// writeConf writes the cluster's settings into postgresql.auto.conf (read
// after postgresql.conf), so no value passes through a shell.
func (s *Server) writeConf() error {
	conf := fmt.Sprintf(`listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
max_prepared_transactions = %d
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = '64MB'
log_min_messages = warning
`, s.Port, strings.ReplaceAll(s.SocketDir, "'", "''"), s.maxPrepared)
	p := filepath.Join(s.DataDir, "postgresql.auto.conf")
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
	}
	return nil
}

func (s *Server) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return fmt.Errorf("pglocal: connect to new cluster: %w", err)
	}
	return conn.Close(ctx)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pglocal: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// openAncestors adds the search (x) permission for others to dir's ancestors
// inside the temporary directory, so an unprivileged user can reach dir.
func openAncestors(dir string) error {
	tmp := filepath.Clean(os.TempDir())
	for p := filepath.Dir(filepath.Clean(dir)); strings.HasPrefix(p, tmp+string(filepath.Separator)); p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, fi.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("pglocal: %w", err)
			}
		}
	}
	return nil
}
