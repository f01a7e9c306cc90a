package harness

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"

	tcexec "github.com/testcontainers/testcontainers-go/exec"
)

// postgresDataDir is PGDATA in the official image and the stand-in.
const postgresDataDir = "/var/lib/postgresql/data"

// postgresWALDir keeps the WAL of a small-disk server off its tmpfs.
const postgresWALDir = "/var/lib/postgresql/wal"

// ballast is the prefix of the files FillDisk writes into the data
// directory.
const ballast = postgresDataDir + "/txsink-test-ballast"

// StartPostgresSmallDisk starts a PostgreSQL server for t alone whose data
// directory is a tmpfs of size (for example "96m") inside its container,
// for full-disk tests (FillDisk, FreeDisk). Its WAL lives outside that
// filesystem (initdb --waldir): with the WAL on a full disk the server
// PANICs and, if crash recovery cannot write either, exits, and a stopped
// container loses its tmpfs. A full data directory makes writes fail with
// SQLSTATE 53100 instead, which is what a sink must survive. It skips the
// test with the reason when no Docker engine answers.
func StartPostgresSmallDisk(t testing.TB, size string) *PostgresService {
	t.Helper()
	requireDocker(t, "(none: the full-disk tests need their own server)")
	p, err := startPostgresWith(t, false, "postgres-small-disk", "", size, map[string]string{"POSTGRES_INITDB_ARGS": "--waldir=" + postgresWALDir})
	if err != nil {
		t.Fatalf("harness: starting PostgreSQL on a %s tmpfs: %v", size, err)
	}
	return &PostgresService{URL: p.url, tb: t, p: p}
}

// FillDisk writes ballast into the data directory until leaveBytes are
// free on its filesystem (a server from StartPostgresSmallDisk); the
// server's next writes beyond that fail with "No space left on device".
// Called again, it adds ballast for what was freed since (the caller
// keeps the disk full over a while so). The ballast is written in 4 KiB
// blocks, so less than one PostgreSQL page of slack is left (64 KiB
// blocks left up to eight: room for the few compressed rows a quiet lane
// writes in a 15-second fault, and one CI run saw no write fail).
// FreeDisk removes it.
func (s *PostgresService) FillDisk(ctx context.Context, leaveBytes int64) error {
	if !s.p.smallDisk {
		return fmt.Errorf("harness: FillDisk needs a server from StartPostgresSmallDisk")
	}
	script := fmt.Sprintf(`set -e
avail=$(df -B1 --output=avail %[2]s | tail -n 1)
size=$((avail - %[3]d))
[ "$size" -ge 4096 ] || exit 0
dd if=/dev/zero of=%[1]s.$(date +%%s%%N) bs=4096 count=$((size / 4096)) 2>/dev/null || true
df -B1 --output=avail %[2]s | tail -n 1`, ballast, postgresDataDir, leaveBytes)
	out, err := s.p.ctr.exec(ctx, "bash", "-c", script)
	if err != nil {
		return fmt.Errorf("harness: filling the disk: %w: %s", err, out)
	}
	return nil
}

// FreeDisk removes FillDisk's ballast.
func (s *PostgresService) FreeDisk(ctx context.Context) error {
	if !s.p.smallDisk {
		return fmt.Errorf("harness: FreeDisk needs a server from StartPostgresSmallDisk")
	}
	out, err := s.p.ctr.exec(ctx, "bash", "-c", "rm -f "+ballast+".*")
	if err != nil {
		return fmt.Errorf("harness: freeing the disk: %w: %s", err, out)
	}
	return nil
}

// FreeBytes returns the free bytes of the data directory's filesystem.
func (s *PostgresService) FreeBytes(ctx context.Context) (int64, error) {
	out, err := s.p.ctr.exec(ctx, "bash", "-c", "df -B1 --output=avail "+postgresDataDir+" | tail -n 1")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(out), 10, 64)
}

// exec runs cmd in the container and returns its output; a non-zero exit
// status is an error.
func (c *managedContainer) exec(ctx context.Context, cmd ...string) (string, error) {
	code, r, err := c.ctr.Exec(ctx, cmd, tcexec.Multiplexed())
	if err != nil {
		return "", err
	}
	b, _ := io.ReadAll(r)
	if code != 0 {
		return string(b), fmt.Errorf("%v exited with %d", cmd, code)
	}
	return string(b), nil
}
