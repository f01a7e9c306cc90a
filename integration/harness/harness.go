// Package harness starts the real services that txsink's integration tests
// run against — a Kafka broker, a PostgreSQL server, a ClickHouse server with
// ZooKeeper — once per test binary, and terminates them when the tests end.
//
// Each service comes from one of two places, checked in this order:
//
//  1. An already running service named by an environment variable
//     (TXSINK_TEST_KAFKA_BOOTSTRAP, TXSINK_TEST_POSTGRES_URL,
//     TXSINK_TEST_POSTGRES_SOURCE_URL, TXSINK_TEST_CLICKHOUSE_ADDR). No Docker is needed; fault-injection
//     methods (Stop, Start, Restart) skip the calling test.
//  2. A container started through testcontainers-go from the image named by
//     TXSINK_TEST_KAFKA_IMAGE, TXSINK_TEST_POSTGRES_IMAGE,
//     TXSINK_TEST_CLICKHOUSE_IMAGE, TXSINK_TEST_ZOOKEEPER_IMAGE and
//     TXSINK_TEST_CLICKHOUSE26_IMAGE, which default to pinned official images
//     (DefaultKafkaImage, ...). CI points them at locally built stand-ins
//     (deploy/testimages) that honour the same environment variables and
//     entry points, so the code here is the same for both.
//
// ClickHouse comes in two lanes, chosen by TXSINK_TEST_CLICKHOUSE_LANE: the
// default lane (TXSINK_TEST_CLICKHOUSE_IMAGE with a ZooKeeper beside it; CI:
// Debian's 18.16) and lane "26" (TXSINK_TEST_CLICKHOUSE26_IMAGE alone, no
// ZooKeeper; CI: ClickHouse 26.9's engine from the chdb-core wheel).
//
// When neither is available the test is skipped with the reason, unless
// TXSINK_TEST_REQUIRE_SERVICES is true, in which case it fails (CI sets this
// so that a broken Docker engine cannot turn the suite into skips).
//
// Containers publish their ports on 127.0.0.1 only, on a host port the harness
// picks, so a restarted container keeps its address. The harness connects only
// to 127.0.0.1. It terminates every container and network it started: at the
// end of Main, on SIGINT/SIGTERM, and shortly before the -test.timeout
// deadline; without Main (no TestMain), each service is private to the test
// that asked for it and is terminated by t.Cleanup. The Ryuk reaper is not
// needed and, where its image cannot be pulled, must be disabled with
// TESTCONTAINERS_RYUK_DISABLED=true.
package harness

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	dockernetwork "github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
)

// Pinned official images, used when the TXSINK_TEST_*_IMAGE variables are
// unset. DefaultKafkaImage's version must match deploy/testimages/kafka/pom.xml
// and DefaultKafkaPreviousImage's the previous lane of build.sh.
const (
	DefaultKafkaImage         = "apache/kafka:4.4.0"
	DefaultKafkaPreviousImage = "apache/kafka:4.1.1"
	DefaultPostgresImage      = "postgres:15.14"
	DefaultClickHouseImage    = "clickhouse/clickhouse-server:25.8"
	// DefaultClickHouse26Image is the server of ClickHouse lane "26".
	DefaultClickHouse26Image = "clickhouse/clickhouse-server:26.9"
	DefaultZooKeeperImage    = "zookeeper:3.8.4"
)

// Environment variables read by the harness.
const (
	EnvKafkaImage         = "TXSINK_TEST_KAFKA_IMAGE"
	EnvKafkaPreviousImage = "TXSINK_TEST_KAFKA_PREVIOUS_IMAGE"
	EnvPostgresImage      = "TXSINK_TEST_POSTGRES_IMAGE"
	EnvClickHouseImage    = "TXSINK_TEST_CLICKHOUSE_IMAGE"
	EnvClickHouse26Image  = "TXSINK_TEST_CLICKHOUSE26_IMAGE"
	EnvClickHouseLane     = "TXSINK_TEST_CLICKHOUSE_LANE"
	EnvZooKeeperImage     = "TXSINK_TEST_ZOOKEEPER_IMAGE"
	EnvKafkaBootstrap     = "TXSINK_TEST_KAFKA_BOOTSTRAP"
	EnvPostgresURL        = "TXSINK_TEST_POSTGRES_URL"
	EnvClickHouseAddr     = "TXSINK_TEST_CLICKHOUSE_ADDR"
	EnvClickHouseUser     = "TXSINK_TEST_CLICKHOUSE_USER"
	EnvClickHousePassword = "TXSINK_TEST_CLICKHOUSE_PASSWORD"
	EnvClickHouseZK       = "TXSINK_TEST_CLICKHOUSE_ZOOKEEPER"
	EnvRequireServices    = "TXSINK_TEST_REQUIRE_SERVICES"
	EnvRunID              = "TXSINK_TEST_RUN_ID"
)

// ErrExternal is returned by fault-injection methods on a service that the
// harness did not start (after skipping the test that called them).
var ErrExternal = errors.New("harness: service was not started by the harness")

// containerLabel marks every container and network the harness starts, so
// that leftovers of a killed test binary can be found:
// docker ps -aq --filter label=io.txsink.test. When TXSINK_TEST_RUN_ID is
// set, runLabel carries its value (.ci/run removes its own leftovers by it).
const (
	containerLabel = "io.txsink.test"
	runLabel       = "io.txsink.test.run"
)

// labels returns the labels of a container or network named name.
func labels(name string) map[string]string {
	l := map[string]string{containerLabel: name}
	if id := os.Getenv(EnvRunID); id != "" {
		l[runLabel] = id
	}
	return l
}

// StartTimeout bounds starting one service, image already present (and a
// restart by Start, which first recovers the logs of a killed broker). It is
// a limit, not a wait: a broker is up in 10–20 s on a quiet machine, but CI
// starts every lane's services at once on 2 cores that other work may load
// as well (a JVM then takes minutes to start), and a start that gives up
// early fails every test of the package that shares the service.
const StartTimeout = 8 * time.Minute

var (
	mainMu      sync.Mutex
	mainRunning bool
	shared      = map[string]*sharedService{} // by service kind, while Main runs
	resources   []resource                    // started while Main runs, in start order
)

// resource is a started container or network.
type resource struct {
	name      string
	terminate func(context.Context) error
}

// sharedService memoises the start of one service kind for the test binary.
type sharedService struct {
	once sync.Once
	val  any
	err  error
}

// Main runs the tests and terminates every container the harness started
// (and removes the binary TxsinkBinary built). Use it in TestMain:
// os.Exit(harness.Main(m)).
func Main(m *testing.M) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	mainMu.Lock()
	mainRunning = true
	mainMu.Unlock()

	stop := make(chan struct{})
	defer close(stop)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var timeout <-chan time.Time
	if d := testTimeout(); d > 0 {
		// go test panics at the deadline, skipping deferred calls: clean up first.
		margin := min(d/10, 30*time.Second)
		timer := time.NewTimer(d - margin)
		defer timer.Stop()
		timeout = timer.C
	}
	go func() {
		select {
		case <-stop:
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "harness: %v: terminating containers\n", sig)
			terminateAll()
			os.Exit(2)
		case <-timeout:
			fmt.Fprintln(os.Stderr, "harness: test timeout is near: terminating containers")
			terminateAll()
		}
	}()

	code := m.Run()
	terminateAll()
	return code
}

// testTimeout returns the -test.timeout flag's value, or 0.
func testTimeout() time.Duration {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return 0
	}
	d, err := time.ParseDuration(f.Value.String())
	if err != nil {
		return 0
	}
	return d
}

// terminateAll terminates every registered resource, newest first.
func terminateAll() {
	mainMu.Lock()
	rs := resources
	resources = nil
	mainMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := len(rs) - 1; i >= 0; i-- {
		if err := rs[i].terminate(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "harness: terminating %s: %v\n", rs[i].name, err)
		}
	}
}

// register arranges for r to be terminated: at the end of Main when the
// service is shared, else at the end of tb.
func register(tb testing.TB, sharedMode bool, r resource) {
	if sharedMode {
		mainMu.Lock()
		resources = append(resources, r)
		mainMu.Unlock()
		return
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.terminate(ctx); err != nil {
			tb.Logf("harness: terminating %s: %v", r.name, err)
		}
	})
}

// service returns the value start produces for kind: shared by the test
// binary while Main runs (started once, on first use), else started for tb
// alone. start registers what it starts with register(tb, sharedMode, ...).
func service[T any](tb testing.TB, kind string, start func(tb testing.TB, sharedMode bool) (T, error)) T {
	tb.Helper()
	mainMu.Lock()
	sharedMode := mainRunning
	var s *sharedService
	if sharedMode {
		s = shared[kind]
		if s == nil {
			s = &sharedService{}
			shared[kind] = s
		}
	}
	mainMu.Unlock()

	if !sharedMode {
		v, err := start(tb, false)
		if err != nil {
			tb.Fatalf("harness: starting %s: %v", kind, err)
		}
		return v
	}
	s.once.Do(func() {
		s.val, s.err = start(tb, true)
	})
	if s.err != nil {
		tb.Fatalf("harness: starting %s (shared by this test binary): %v", kind, s.err)
	}
	return s.val.(T)
}

// Unavailable skips tb because something it needs besides the harness's
// services (a JVM, a Python virtualenv, a browser) is missing, or fails it
// when TXSINK_TEST_REQUIRE_SERVICES is true (CI), so that CI cannot pass
// as a run of skips.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if boolEnv(EnvRequireServices) {
		tb.Fatalf("%s, but %s is true", msg, EnvRequireServices)
	}
	tb.Skipf("%s: skipping", msg)
}

// requireDocker skips (or, with TXSINK_TEST_REQUIRE_SERVICES, fails) tb
// unless a Docker engine answers. envVar names the variable that would have
// pointed at an existing service instead.
func requireDocker(tb testing.TB, envVar string) {
	tb.Helper()
	if err := dockerAvailable(); err != nil {
		msg := fmt.Sprintf("no Docker engine (%v) and %s is not set", err, envVar)
		if boolEnv(EnvRequireServices) {
			tb.Fatalf("harness: %s, but %s is true", msg, EnvRequireServices)
		}
		tb.Skipf("harness: %s: skipping", msg)
	}
}

var (
	dockerOnce sync.Once
	dockerErr  error
)

// dockerAvailable reports whether testcontainers can reach a Docker engine.
func dockerAvailable() error {
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			dockerErr = err
			return
		}
		defer cli.Close()
		if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
			dockerErr = err
		}
	})
	return dockerErr
}

// boolEnv reports whether the variable is set to a true value.
func boolEnv(name string) bool {
	v, _ := strconv.ParseBool(os.Getenv(name))
	return v
}

// envOr returns the variable's value, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// containerSpec describes a container to start.
type containerSpec struct {
	name     string // for messages
	image    string
	env      map[string]string
	cmd      []string
	ports    map[string]int // container port ("9092/tcp") -> host port on 127.0.0.1
	files    []testcontainers.ContainerFile
	networks []string
	aliases  map[string][]string
	// entrypoint replaces the image's entry point (nil: the image's).
	entrypoint []string
	// tmpfs mounts a tmpfs of the given options at each path
	// ("size=64m").
	tmpfs map[string]string
}

// managedContainer is a started container.
type managedContainer struct {
	name string
	ctr  testcontainers.Container
}

// startContainer creates and starts the container described by spec,
// publishing its ports on 127.0.0.1 only, and registers it for termination.
// It does not wait for the service inside to be ready.
func startContainer(ctx context.Context, tb testing.TB, sharedMode bool, spec containerSpec) (*managedContainer, error) {
	bindings := dockernetwork.PortMap{}
	var exposed []string
	for cport, hport := range spec.ports {
		p, err := dockernetwork.ParsePort(cport)
		if err != nil {
			return nil, err
		}
		bindings[p] = []dockernetwork.PortBinding{{
			HostIP:   netip.MustParseAddr("127.0.0.1"),
			HostPort: strconv.Itoa(hport),
		}}
		exposed = append(exposed, cport)
	}
	req := testcontainers.ContainerRequest{
		Image:          spec.image,
		Env:            spec.env,
		Cmd:            spec.cmd,
		ExposedPorts:   exposed,
		Files:          spec.files,
		Networks:       spec.networks,
		NetworkAliases: spec.aliases,
		Labels:         labels(spec.name),
		Entrypoint:     spec.entrypoint,
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.PortBindings = bindings
			if len(spec.tmpfs) > 0 {
				hc.Tmpfs = spec.tmpfs
			}
		},
	}
	ctr, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req,
		Started:          true,
	})
	if ctr != nil {
		c := ctr
		register(tb, sharedMode, resource{name: spec.name, terminate: func(ctx context.Context) error {
			return c.Terminate(ctx)
		}})
	}
	if err != nil {
		return nil, fmt.Errorf("starting %s container from image %s: %w", spec.name, spec.image, err)
	}
	return &managedContainer{name: spec.name, ctr: ctr}, nil
}

// kill sends SIGKILL to the container's processes: a crash, data kept.
func (c *managedContainer) kill(ctx context.Context) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.ContainerKill(ctx, c.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("killing %s: %w", c.name, err)
	}
	// Wait until the engine reports it stopped, so that Start works.
	for {
		st, err := c.ctr.State(ctx)
		if err != nil {
			return err
		}
		if !st.Running {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop stops the container gracefully (its image's stop signal), killing it
// after timeout.
func (c *managedContainer) stop(ctx context.Context, timeout time.Duration) error {
	if err := c.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("stopping %s: %w", c.name, err)
	}
	return nil
}

// start starts the stopped container again; its ports stay the same.
func (c *managedContainer) start(ctx context.Context) error {
	if err := c.ctr.Start(ctx); err != nil {
		return fmt.Errorf("starting %s: %w", c.name, err)
	}
	return nil
}

// logsTail returns the last lines of the container's output, for errors.
func (c *managedContainer) logsTail(ctx context.Context) string {
	rc, err := c.ctr.Logs(ctx)
	if err != nil {
		return ""
	}
	defer rc.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// waitReady calls probe until it succeeds or ctx ends; on failure the error
// carries the container's last output.
func waitReady(ctx context.Context, c *managedContainer, what string, probe func(context.Context) error) error {
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = probe(pctx)
		cancel()
		if last == nil {
			return nil
		}
		if c != nil {
			if st, err := c.ctr.State(ctx); err == nil && !st.Running && st.Status == "exited" {
				return fmt.Errorf("%s exited (code %d) before it was ready: %v\n%s", what, st.ExitCode, last, c.logsTail(context.Background()))
			}
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("%s not ready: %v (last error: %v)", what, ctx.Err(), last)
			if c != nil {
				msg += "\n" + c.logsTail(context.Background())
			}
			return errors.New(msg)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var nonIdent = regexp.MustCompile(`[^a-z0-9]+`)

// uniqueName returns a lowercase identifier derived from the test's name,
// unique in this run, at most 50 characters: safe as a database name in
// PostgreSQL and ClickHouse without quoting.
func uniqueName(tb testing.TB) string {
	base := strings.Trim(nonIdent.ReplaceAllString(strings.ToLower(tb.Name()), "_"), "_")
	if len(base) > 30 {
		base = base[:30]
	}
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		tb.Fatalf("harness: random name: %v", err)
	}
	return fmt.Sprintf("t_%s_%x", base, rnd)
}
