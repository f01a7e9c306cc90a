// Package connectpeer prepares and starts a real Apache Kafka Connect
// worker: Connect 4.1.1 with Debezium's JDBC sink and Connect's own
// FileStreamSink, its class path resolved by Maven from bench/peer/pom.xml
// and cached. The benchmark runs it as its peer; the API differential test
// (integration/connectdiff_test.go) compares txsink's REST API with it.
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
}

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
	b, err := os.ReadFile(pom)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	cache := os.Getenv("TXSINK_BENCH_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "txsink-bench")
	}
	libs := filepath.Join(cache, "peer-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(filepath.Join(libs, ".complete")); err == nil {
		return &Peer{Libs: libs, Java: java}, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return nil, fmt.Errorf("%w: no mvn on PATH (needed once to fetch Kafka Connect and Debezium from Maven Central)", ErrUnavailable)
	}
	tmp := libs + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, mvn, "-B", "-q", "-Dstyle.color=never", "-f", pom,
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return nil, fmt.Errorf("mvn dependency:copy-dependencies on bench/peer/pom.xml failed: %v\n%s", err, LastLines(string(out), 15))
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
		return nil, err
	}
	_ = os.RemoveAll(libs)
	if err := os.Rename(tmp, libs); err != nil {
		return nil, err
	}
	return &Peer{Libs: libs, Java: java}, nil
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
	args := []string{"-Xms" + heap, "-Xmx" + heap, "-XX:+UseG1GC",
		"-Dlog4j2.configurationFile=" + lf,
		"-cp", filepath.Join(p.Libs, "*"),
		"org.apache.kafka.connect.cli.ConnectStandalone", workerFile}
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
