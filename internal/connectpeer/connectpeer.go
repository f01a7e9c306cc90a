// Package connectpeer prepares and starts a real Apache Kafka Connect
// worker: Connect 4.1.1 with Debezium's JDBC sink and Connect's own
// FileStreamSink, its class path resolved by Maven from bench/peer/pom.xml
// and cached; or a plain worker (worker/pom.xml) with plugins resolved the
// same way into a plugin.path directory (Debezium's PostgreSQL source
// connector, deploy/debezium). The
// benchmark runs it as its peer; the API differential test
// (integration/connectdiff_test.go) compares txsink's REST API with it;
// the replication test (integration/replication_test.go) runs Debezium's
// source connector on it.
package connectpeer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Peer is a resolved Connect class path and the java that runs it.
type Peer struct {
	// Libs is the directory of the class path's jars.
	Libs string
	// Java is the java executable.
	Java string
	// JVM are the worker JVM's options besides its heap: nil is G1 with
	// both compilers, as deployed (what the benchmark measures); a test
	// peer, short-lived and lightly loaded, runs with LightJVM.
	JVM []string
}

// LightJVM are JVM options for a short-lived, lightly loaded worker in a
// test: the client compiler only and the serial collector, which start
// and run such a worker on less CPU than the server compiler's
// compilations take.
var LightJVM = []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}

// ErrUnavailable is wrapped by Prepare's error when the machine lacks
// what the peer needs (java or mvn): callers skip rather than fail.
var ErrUnavailable = errors.New("Kafka Connect peer unavailable")

// Prepare resolves the class path with plain "mvn dependency:copy-dependencies"
// (the registry comes from the machine's Maven settings), cached by the
// pom's hash under $TXSINK_BENCH_CACHE or ~/.cache/txsink-bench, so a
// second call takes no time. repo is the repository root. Cancelling ctx
// stops Maven; nothing half-written is kept.
func Prepare(ctx context.Context, repo string) (*Peer, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("%w: no java on PATH (Kafka Connect needs Java 17)", ErrUnavailable)
	}
	pom := filepath.Join(repo, "bench", "peer", "pom.xml")
	libs, err := resolve(ctx, pom, "peer", "")
	if err != nil {
		return nil, err
	}
	return &Peer{Libs: libs, Java: java}, nil
}

// PrepareWorker is Prepare for a plain Connect worker, with no connector
// on its class path (internal/connectpeer/worker/pom.xml): connectors run
// on it as plugins (ResolvePlugin), isolated from each other.
func PrepareWorker(ctx context.Context, repo string) (*Peer, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("%w: no java on PATH (Kafka Connect needs Java 17)", ErrUnavailable)
	}
	libs, err := resolve(ctx, filepath.Join(repo, "internal", "connectpeer", "worker", "pom.xml"), "worker", "")
	if err != nil {
		return nil, err
	}
	return &Peer{Libs: libs, Java: java}, nil
}

// ResolvePlugin resolves a Connect plugin (a connector and its runtime
// dependencies, as pom lists them) into its own directory, cached like
// Prepare's class path, and returns the directory to put in the worker's
// plugin.path: it holds one plugin directory, name, with the jars. The
// worker loads the plugin in isolation (its own class loader), so its
// dependencies may differ in version from the worker's class path.
// Cancelling ctx stops Maven; nothing half-written is kept.
func ResolvePlugin(ctx context.Context, pom, name string) (string, error) {
	return resolve(ctx, pom, "plugin-"+name, name)
}

// resolve copies pom's runtime dependencies into
// <cache>/<prefix>-<hash of pom>[/sub] once and returns that directory
// (without sub). It is safe to call at once from several goroutines and
// processes (test binaries of CI lanes share the cache): each fills a
// directory of its own and renames it into place; the first rename wins
// and the others use its result.
func resolve(ctx context.Context, pom, prefix, sub string) (string, error) {
	b, err := os.ReadFile(pom)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	cache := os.Getenv("TXSINK_BENCH_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "txsink-bench")
	}
	dir := filepath.Join(cache, prefix+"-"+hex.EncodeToString(sum[:6]))
	complete := func() bool { _, err := os.Stat(filepath.Join(dir, ".complete")); return err == nil }
	if complete() {
		return dir, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("%w: no mvn on PATH (needed once to fetch Kafka Connect and Debezium from Maven Central)", ErrUnavailable)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, filepath.Base(dir)+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp) // gone once renamed; what is left otherwise
	out := filepath.Join(tmp, sub)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-Dstyle.color=never", "-f", pom,
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+out)
	if outb, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("mvn dependency:copy-dependencies on %s failed: %v\n%s", pom, err, LastLines(string(outb), 15))
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if complete() {
			return dir, nil // another caller got there first
		}
		return "", fmt.Errorf("%w (remove %s to fetch it again)", err, dir)
	}
	return dir, nil
}

// Log4j is the workers' Log4j 2 configuration: warnings to standard
// error, plus the sink task's info lines.
const Log4j = `status = warn
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_ERR
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.worker.name = org.apache.kafka.connect.runtime.WorkerSinkTask
logger.worker.level = info
`

// Standalone returns the command that runs Connect's standalone worker
// with the worker properties file and connector files, writing
// log4j2.properties into dir. heap is the JVM heap ("1g").
func (p *Peer) Standalone(dir, heap, workerFile string, connectorFiles ...string) (*exec.Cmd, error) {
	lf := filepath.Join(dir, "log4j2.properties")
	if err := os.WriteFile(lf, []byte(Log4j), 0o600); err != nil {
		return nil, err
	}
	jvm := p.JVM
	if jvm == nil {
		jvm = []string{"-XX:+UseG1GC"}
	}
	args := append([]string{"-Xms" + heap, "-Xmx" + heap}, jvm...)
	args = append(args, "-Dlog4j2.configurationFile="+lf,
		"-cp", filepath.Join(p.Libs, "*"),
		"org.apache.kafka.connect.cli.ConnectStandalone", workerFile)
	return exec.Command(p.Java, append(args, connectorFiles...)...), nil
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
