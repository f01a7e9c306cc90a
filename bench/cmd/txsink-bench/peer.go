package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/internal/connectpeer"
)

// peer runs Kafka Connect's standalone worker with Debezium's JDBC sink
// connector, class path resolved from bench/peer/pom.xml by Maven
// (internal/connectpeer, cached).
type peer struct{ *connectpeer.Peer }

// preparePeer resolves the peer's class path; it returns why the peer
// cannot run otherwise.
func preparePeer(ctx context.Context, repo string) (*peer, error) {
	p, err := connectpeer.Prepare(ctx, repo)
	if err != nil {
		return nil, err
	}
	return &peer{p}, nil
}

func lastLines(s string, n int) string { return connectpeer.LastLines(s, n) }

// peerConfig returns the worker and connector properties of one run.
// Tuning: the same batch size as txsink (10,000 records per batch and per
// poll) and read_committed; otherwise Debezium's defaults
// (insert.mode=insert, primary.key.mode=none, C3P0 pool).
func peerConfig(dir, name, bootstrap, pgURL, topic, table string, restPort int) (worker, connector string, err error) {
	u, err := url.Parse(pgURL)
	if err != nil {
		return "", "", err
	}
	pw, _ := u.User.Password()
	jdbc := fmt.Sprintf("jdbc:postgresql://%s%s", u.Host, u.Path)
	worker = strings.Join([]string{
		"bootstrap.servers=" + bootstrap,
		"key.converter=org.apache.kafka.connect.json.JsonConverter",
		"key.converter.schemas.enable=false",
		"value.converter=org.apache.kafka.connect.json.JsonConverter",
		"value.converter.schemas.enable=true",
		"offset.storage.file.filename=" + filepath.Join(dir, name+".offsets"),
		"offset.flush.interval.ms=1000",
		"listeners=http://127.0.0.1:" + strconv.Itoa(restPort),
		"plugin.discovery=only_scan",
		"consumer.isolation.level=read_committed",
		"consumer.max.poll.records=10000",
		"consumer.auto.offset.reset=earliest",
		"consumer.fetch.max.bytes=33554432",
		"",
	}, "\n")
	connector = strings.Join([]string{
		"name=" + name,
		"connector.class=io.debezium.connector.jdbc.JdbcSinkConnector",
		"tasks.max=1",
		"topics=" + topic,
		"connection.url=" + jdbc,
		"connection.username=" + u.User.Username(),
		"connection.password=" + pw,
		"insert.mode=insert",
		"primary.key.mode=none",
		"schema.evolution=none",
		"delete.enabled=false",
		"table.name.format=" + table,
		"collection.name.format=" + table,
		"batch.size=10000",
		"",
	}, "\n")
	return worker, connector, nil
}

// peerProcess is a running Connect worker.
type peerProcess struct {
	cmd  *exec.Cmd
	out  *os.File
	done chan struct{}
}

func (pp *peerProcess) exited() bool {
	select {
	case <-pp.done:
		return true
	default:
		return false
	}
}

func (pp *peerProcess) stop() usage {
	hwm := peakRSS(pp.cmd.Process.Pid)
	if !pp.exited() {
		_ = pp.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-pp.done:
		case <-time.After(30 * time.Second):
			_ = pp.cmd.Process.Kill()
			<-pp.done
		}
	}
	u := rusageOf(pp.cmd)
	if hwm > 0 {
		u.PeakRSSMB = hwm
	}
	return u
}

func (pp *peerProcess) logTail() string {
	b, _ := os.ReadFile(pp.out.Name())
	return lastLines(string(b), 25)
}

func (p *peer) start(dir, name, worker, connector string) (*peerProcess, error) {
	wf := filepath.Join(dir, name+"-worker.properties")
	cf := filepath.Join(dir, name+"-connector.properties")
	for f, s := range map[string]string{wf: worker, cf: connector} {
		if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
			return nil, err
		}
	}
	out, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd, err := p.Standalone(dir, "1g", wf, cf)
	if err != nil {
		out.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	pp := &peerProcess{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); out.Close(); close(pp.done) }()
	return pp, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// groupCaughtUp reports whether group's committed offsets reached ends.
func groupCaughtUp(ctx context.Context, adm *kadm.Client, group, topic string, ends map[int32]int64) (bool, error) {
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return false, err
	}
	for p, e := range ends {
		o, ok := offs.Lookup(topic, p)
		if !ok || o.At < e {
			return false, nil
		}
	}
	return true, nil
}

// runPeer drains the workload's envelope topic with Connect + Debezium
// into a fresh table. The clock runs from the first row visible to the
// group's committed offsets reaching the end (Connect commits every
// second, after the rows: at most ~1 s against the peer).
func (b *bench) runPeer(ctx context.Context, w *workload) (Run, error) {
	name := b.name("peer")
	table := name
	if err := createRowTable(ctx, b.pool, table); err != nil {
		return Run{}, err
	}
	defer dropTable(context.WithoutCancel(ctx), b.pool, table)
	port, err := freePort()
	if err != nil {
		return Run{}, err
	}
	worker, connector, err := peerConfig(b.tmp, name, b.bootstrap, b.dbURL, w.EnvelopeTopic, table, port)
	if err != nil {
		return Run{}, err
	}
	pp, err := b.peer.start(b.tmp, name, worker, connector)
	if err != nil {
		return Run{}, err
	}
	defer pp.stop()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.bootstrap))
	if err != nil {
		return Run{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	n := w.EnvelopeRecords
	deadline := time.Now().Add(b.drainTimeout(n, 1000))
	var first time.Time
	for {
		if pp.exited() {
			return Run{}, fmt.Errorf("Kafka Connect exited:\n%s", pp.logTail())
		}
		if time.Now().After(deadline) {
			return Run{}, fmt.Errorf("Kafka Connect did not drain %d records in time; its log:\n%s", n, pp.logTail())
		}
		if err := ctx.Err(); err != nil {
			return Run{}, err
		}
		if first.IsZero() {
			var any bool
			if err := b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM "`+table+`")`).Scan(&any); err != nil {
				return Run{}, err
			}
			if any {
				first = time.Now()
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		done, err := groupCaughtUp(ctx, adm, "connect-"+name, w.EnvelopeTopic, w.EnvelopeEnds)
		if err != nil {
			return Run{}, err
		}
		if done {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(first)
	u := pp.stop()
	if err := checkRows(ctx, b.pool, table, n); err != nil {
		return Run{}, err
	}
	return Run{Seconds: elapsed.Seconds(), RPS: float64(n) / elapsed.Seconds(), CPUSeconds: u.CPUSeconds, PeakRSSMB: u.PeakRSSMB, Records: n}, nil
}
