package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
)

// Settings of the ClickHouse server the harness starts.
const (
	clickhouseUser     = "txsink"
	clickhousePassword = "txsink"
	// ClickHouseShard and ClickHouseReplica are the values of the server's
	// {shard} and {replica} macros.
	ClickHouseShard   = "01"
	ClickHouseReplica = "replica01"
)

// clickhouseZooKeeperConfig points ClickHouse at the ZooKeeper container and
// defines the macros ReplicatedMergeTree paths use. The <yandex> root is
// understood by 18.16 and by current releases alike.
const clickhouseZooKeeperConfig = `<yandex>
    <zookeeper>
        <node>
            <host>zookeeper</host>
            <port>2181</port>
        </node>
        <session_timeout_ms>30000</session_timeout_ms>
    </zookeeper>
    <macros>
        <shard>` + ClickHouseShard + `</shard>
        <replica>` + ClickHouseReplica + `</replica>
    </macros>
</yandex>
`

// ClickHouse lanes: which server harness.ClickHouse starts, chosen by
// TXSINK_TEST_CLICKHOUSE_LANE.
const (
	// LaneDefault ("" or "default"): TXSINK_TEST_CLICKHOUSE_IMAGE with a
	// ZooKeeper beside it (HasZooKeeper). CI: Debian's ClickHouse 18.16,
	// identical-block de-duplication into Replicated*MergeTree.
	LaneDefault = "default"
	// Lane26 ("26"): TXSINK_TEST_CLICKHOUSE26_IMAGE alone, without
	// ZooKeeper. CI: ClickHouse 26.9's engine from the chdb-core wheel,
	// insert_deduplication_token into MergeTree tables with a
	// non_replicated_deduplication_window.
	Lane26 = "26"
)

// ClickHouseLanes lists every lane, the default first.
var ClickHouseLanes = []string{LaneDefault, Lane26}

// ClickHouseLane returns the lane TXSINK_TEST_CLICKHOUSE_LANE names, or an
// error naming the variable when it names none.
func ClickHouseLane() (string, error) {
	switch v := os.Getenv(EnvClickHouseLane); v {
	case "", LaneDefault:
		return LaneDefault, nil
	case Lane26:
		return Lane26, nil
	default:
		return "", fmt.Errorf("harness: %s=%q: want %q or %q", EnvClickHouseLane, v, LaneDefault, Lane26)
	}
}

// ClickHouseService is a ClickHouse server reachable over the native
// protocol. When HasZooKeeper, Replicated*MergeTree tables work, with the
// {shard} and {replica} macros defined; their ZooKeeper path must be unique
// per table (put the database name in it: old servers lack {database}).
type ClickHouseService struct {
	// Addr is the native-protocol address, "127.0.0.1:port".
	Addr string
	// User and Password authenticate on Addr.
	User, Password string
	// HasZooKeeper reports whether the server has ZooKeeper configured.
	HasZooKeeper bool
	// Lane is the lane the server was started for (LaneDefault for an
	// external server).
	Lane string

	tb testing.TB
	c  *clickhouseShared
}

type clickhouseShared struct {
	addr, user, password string
	zk                   bool
	lane                 string
	ctr                  *managedContainer // nil for an external server
}

// ClickHouse returns the server of the lane TXSINK_TEST_CLICKHOUSE_LANE
// names (see ClickHouseOfLane).
func ClickHouse(t testing.TB) *ClickHouseService {
	t.Helper()
	lane, err := ClickHouseLane()
	if err != nil {
		t.Fatal(err)
	}
	return ClickHouseOfLane(t, lane)
}

// ClickHouseOfLane returns the server of lane (LaneDefault or Lane26),
// shared by the test binary and started on first use: for LaneDefault with
// a ZooKeeper beside it, for Lane26 alone. TXSINK_TEST_CLICKHOUSE_ADDR
// replaces both lanes' servers. It skips the test with the reason when no
// Docker engine answers and TXSINK_TEST_CLICKHOUSE_ADDR is unset.
func ClickHouseOfLane(t testing.TB, lane string) *ClickHouseService {
	t.Helper()
	if addr := os.Getenv(EnvClickHouseAddr); addr != "" {
		c := &clickhouseShared{
			addr:     addr,
			user:     envOr(EnvClickHouseUser, "default"),
			password: os.Getenv(EnvClickHousePassword),
			zk:       boolEnv(EnvClickHouseZK),
			lane:     LaneDefault,
		}
		return newClickHouseService(t, c)
	}
	requireDocker(t, EnvClickHouseAddr)
	switch lane {
	case LaneDefault:
		return newClickHouseService(t, service(t, "clickhouse", startClickHouse))
	case Lane26:
		return newClickHouseService(t, service(t, "clickhouse-26", startClickHouse26))
	}
	t.Fatalf("harness: unknown ClickHouse lane %q (want %q or %q)", lane, LaneDefault, Lane26)
	return nil
}

func newClickHouseService(t testing.TB, c *clickhouseShared) *ClickHouseService {
	return &ClickHouseService{Addr: c.addr, User: c.user, Password: c.password, HasZooKeeper: c.zk, Lane: c.lane, tb: t, c: c}
}

// External reports whether the server was not started by the harness (then
// Restart skips the test).
func (s *ClickHouseService) External() bool { return s.c.ctr == nil }

// Options returns clickhouse-go options for database db ("" for "default")
// over the native protocol.
func (s *ClickHouseService) Options(db string) *clickhouse.Options {
	if db == "" {
		db = "default"
	}
	return &clickhouse.Options{
		Addr:        []string{s.Addr},
		Protocol:    clickhouse.Native,
		Auth:        clickhouse.Auth{Database: db, Username: s.User, Password: s.Password},
		DialTimeout: 5 * time.Second,
	}
}

// Conn opens a native-protocol connection to database db ("" for "default"),
// closed when t ends.
func (s *ClickHouseService) Conn(t testing.TB, db string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(s.Options(db))
	if err != nil {
		t.Fatalf("harness: opening ClickHouse connection: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Exec runs one statement on the "default" database.
func (s *ClickHouseService) Exec(ctx context.Context, sql string, args ...any) error {
	conn, err := clickhouse.Open(s.Options(""))
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Exec(ctx, sql, args...)
}

// NewDatabase creates a database with a unique name derived from t's name,
// returns the name, and drops the database (with its tables) when t ends.
func (s *ClickHouseService) NewDatabase(t testing.TB) string {
	t.Helper()
	name := uniqueName(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("harness: creating ClickHouse database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Logf("harness: dropping ClickHouse database %s: %v", name, err)
		}
	})
	return name
}

// Restart stops the server gracefully (killing it after 30 s), starts it
// again with the same data and address, and returns once it answers queries.
// ZooKeeper keeps running. For a server the harness did not start, it skips
// the calling test.
func (s *ClickHouseService) Restart(ctx context.Context) error {
	if s.c.ctr == nil {
		s.tb.Skipf("harness: ClickHouse is external (%s): cannot restart it", EnvClickHouseAddr)
		return ErrExternal
	}
	if err := s.c.ctr.stop(ctx, 30*time.Second); err != nil {
		return err
	}
	if err := s.c.ctr.start(ctx); err != nil {
		return err
	}
	return waitReady(ctx, s.c.ctr, "ClickHouse", s.ready)
}

// ready checks that the server answers a query.
func (s *ClickHouseService) ready(ctx context.Context) error {
	return clickhouseReady(ctx, s.Options(""))
}

func clickhouseReady(ctx context.Context, opts *clickhouse.Options) error {
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return err
	}
	defer conn.Close()
	var v string
	return conn.QueryRow(ctx, "SELECT version()").Scan(&v)
}

func startClickHouse(tb testing.TB, sharedMode bool) (*clickhouseShared, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()

	nw, err := network.New(ctx, network.WithLabels(labels("clickhouse")))
	if err != nil {
		return nil, err
	}
	// Registered first, so terminated after the containers attached to it.
	register(tb, sharedMode, resource{name: "clickhouse network", terminate: func(ctx context.Context) error {
		return nw.Remove(ctx)
	}})

	var zkAddr string
	zk, err := startWithFreePort(func(port int) (*managedContainer, error) {
		zkAddr = "127.0.0.1:" + strconv.Itoa(port)
		return startContainer(ctx, tb, sharedMode, containerSpec{
			name:     "zookeeper",
			image:    envOr(EnvZooKeeperImage, DefaultZooKeeperImage),
			env:      map[string]string{"ZOO_4LW_COMMANDS_WHITELIST": "srvr,ruok", "JVMFLAGS": "-Xmx512m " + LightJVM},
			ports:    map[string]int{"2181/tcp": port},
			networks: []string{nw.Name},
			aliases:  map[string][]string{nw.Name: {"zookeeper"}},
		})
	})
	if err != nil {
		return nil, err
	}
	// ClickHouse's first ZooKeeper session must not meet a server that
	// accepts connections but does not serve yet.
	if err := waitReady(ctx, zk, "ZooKeeper", func(ctx context.Context) error { return zookeeperReady(ctx, zkAddr) }); err != nil {
		return nil, err
	}

	return runClickHouse(ctx, tb, sharedMode, LaneDefault, containerSpec{
		name:  "clickhouse",
		image: envOr(EnvClickHouseImage, DefaultClickHouseImage),
		files: []testcontainers.ContainerFile{{
			Reader:            strings.NewReader(clickhouseZooKeeperConfig),
			ContainerFilePath: "/etc/clickhouse-server/config.d/txsink-zookeeper.xml",
			FileMode:          0o644,
		}},
		networks: []string{nw.Name},
	})
}

// startClickHouse26 starts lane 26's server: TXSINK_TEST_CLICKHOUSE26_IMAGE
// without ZooKeeper.
func startClickHouse26(tb testing.TB, sharedMode bool) (*clickhouseShared, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	return runClickHouse(ctx, tb, sharedMode, Lane26, containerSpec{
		name:  "clickhouse-26",
		image: envOr(EnvClickHouse26Image, DefaultClickHouse26Image),
	})
}

// runClickHouse starts the ClickHouse container spec describes on a free
// port, with the official image's variables that create the tests' user,
// and waits until it answers queries. Lane LaneDefault has ZooKeeper.
func runClickHouse(ctx context.Context, tb testing.TB, sharedMode bool, lane string, spec containerSpec) (*clickhouseShared, error) {
	var c *clickhouseShared
	ctr, err := startWithFreePort(func(port int) (*managedContainer, error) {
		c = &clickhouseShared{
			addr:     "127.0.0.1:" + strconv.Itoa(port),
			user:     clickhouseUser,
			password: clickhousePassword,
			zk:       lane == LaneDefault,
			lane:     lane,
		}
		spec.env = map[string]string{
			"CLICKHOUSE_USER":                      clickhouseUser,
			"CLICKHOUSE_PASSWORD":                  clickhousePassword,
			"CLICKHOUSE_DEFAULT_ACCESS_MANAGEMENT": "1",
		}
		spec.ports = map[string]int{"9000/tcp": port}
		return startContainer(ctx, tb, sharedMode, spec)
	})
	if err != nil {
		return nil, err
	}
	c.ctr = ctr
	svc := &ClickHouseService{Addr: c.addr, User: c.user, Password: c.password}
	if err := waitReady(ctx, ctr, "ClickHouse", svc.ready); err != nil {
		return nil, err
	}
	return c, nil
}

// startWithFreePort calls start with a free port on 127.0.0.1, trying again
// with another port if it fails (the port can be taken before Docker binds it).
func startWithFreePort(start func(port int) (*managedContainer, error)) (*managedContainer, error) {
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		c, err := start(port)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// zookeeperReady checks with the "srvr" four-letter command that ZooKeeper
// serves requests.
func zookeeperReady(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return err
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return err
	}
	if !strings.Contains(string(out), "Mode: ") {
		return fmt.Errorf("ZooKeeper not serving: %q", out)
	}
	return nil
}
