package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/clickhouse"
	"github.com/txsink/txsink/internal/verify"
)

// Exit codes of "txsink verify".
const (
	exitVerifyOK     = 0 // no sink fault (upstream anomalies may be reported)
	exitVerifyFault  = 1 // at least one sink fault
	exitVerifyUsage  = 2
	exitVerifyFailed = 3 // the audit could not be done (connection, missing table, …)
)

const verifyUsage = `usage: txsink verify [flags]

Audits a connector's PostgreSQL or ClickHouse sink against Kafka: reads the
sink's rows, stored offsets and prepared transactions (PostgreSQL, one
snapshot) or unfinished intents (ClickHouse), then scans the
input topics with read_committed isolation, and reports per partition: loss,
duplicates (by coordinates and by payload id), aborted reads, value
mismatches, rows beyond the stored offset, offsets past the stable end or
gone backwards, leftover prepared transactions or intents, and lag.

Exit status: 0 no sink fault, 1 sink fault found, 2 usage, 3 could not check.

Typical use, with the connector's own config file:

  txsink verify -bootstrap kafka:9092 -config connector.json -id-column id -id-field id

With -source-url it compares replicated tables instead (change data
capture): each source PostgreSQL table with its copy in the sink, by key and
a per-row checksum, in a snapshot of each side, and reports missing, extra
and different rows and the replication lag. Exit status: 0 equal, 1
different, 2 usage, 3 could not check.

  txsink verify -source-url postgres://src/shop -config replica.json

flags:
`

func cmdVerify(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, verifyUsage)
		fs.PrintDefaults()
	}
	wf := registerWorkerFlags(fs, "worker-config", map[string]string{"bootstrap": config.KeyWorkerBootstrap})
	var (
		cfgPath      = fs.String("config", "", "connector config file (as for txsink run): fills -connector, -topics, -sink-url, -table, -schema, -offsets-table and -dlq-table; explicit flags win")
		topics       = fs.String("topics", "", "input topics, comma-separated")
		sinkURL      = fs.String("sink-url", envOr("TXSINK_VERIFY_SINK_URL", ""), "URL of the sink database: postgres://… or jdbc:postgresql://… for PostgreSQL, clickhouse://host:9000/db (or tcp://…) for ClickHouse (env TXSINK_VERIFY_SINK_URL)")
		sinkUser     = fs.String("sink-user", "", "sink user, overrides the URL's and the config file's connection.user")
		sinkPassword = fs.String("sink-password", envOr("TXSINK_VERIFY_SINK_PASSWORD", ""), "sink password, overrides the URL's and connection.password (env TXSINK_VERIFY_SINK_PASSWORD)")
		intentsTable = fs.String("intents-table", "", "ClickHouse: intents table (default txsink_intents)")
		connector    = fs.String("connector", "", "connector name (key of its rows in the offsets table)")
		table        = fs.String("table", "", "target table, ${topic} replaced by each topic: the connector's table.name.format (default ${topic})")
		schema       = fs.String("schema", "", "schema of the target, offsets and dead-letter tables (default public)")
		offsetsTable = fs.String("offsets-table", "", "offsets table (default txsink_offsets)")
		dlqTable     = fs.String("dlq-table", "", "dead-letter table, if the connector has one: records there count as delivered")
		topicCol     = fs.String("topic-column", "__connect_topic", `column holding the record's topic ("-": none, one topic per table)`)
		partCol      = fs.String("partition-column", "__connect_partition", "column holding the record's partition")
		offsetCol    = fs.String("offset-column", "__connect_offset", "column holding the record's offset")
		idColumn     = fs.String("id-column", "", `column holding a payload id ("col" or "jsoncol->field"); enables duplicate-by-id and id mismatch checks`)
		idField      = fs.String("id-field", "", `where the payload id is in each record: a dotted path into the JSON value ("id", "meta.id") or "key"; default: the id column's name`)
		compare      = fs.String("compare", "", "columns compared with record fields, comma-separated: col or col=field.path")
		producerLog  = fs.String("producer-log", "", "upstream producer log (JSON lines: txn, outcome acknowledged|failed|unknown, records with topic/partition/offset/id) to tell broker anomalies from sink faults")
		history      = fs.String("offset-history", "", "stored offsets sampled over time (JSON lines: at, topic, partition, next_offset, fence) to detect offsets going backwards")
		grace        = fs.Duration("prepared-grace", time.Minute, "prepared transactions of the connector younger than this are in flight, not leftovers")
		maxLag       = fs.Int64("max-lag", -1, "fail when a partition has more undelivered committed records than this (-1: report lag only)")
		fromFirstRow = fs.Bool("from-first-row", false, "check loss only from each partition's first row (connectors started with offsets.initial=latest)")
		scanIdle     = fs.Duration("scan-idle", 5*time.Second, "end a partition's scan after this long without progress")
		timeout      = fs.Duration("timeout", 10*time.Minute, "bound on the whole audit")
		output       = fs.String("output", "text", "text or json")
		examples     = fs.Int("max-examples", 100, "anomalies listed per kind (counts are always exact); with -source-url, examples per kind and table (default 10)")
		sourceURL    = fs.String("source-url", envOr("TXSINK_VERIFY_SOURCE_URL", ""), "compare replicated tables: the source PostgreSQL database (postgres://…) whose tables the sink copies (env TXSINK_VERIFY_SOURCE_URL)")
		tables       = fs.String("tables", "", "with -source-url: source tables, comma-separated (schema.table or table); default: the tables of the source's publications")
		ignoreCols   = fs.String("ignore-columns", "", "with -source-url: columns not compared, comma-separated: col, table.col or schema.table.col")
		topicPrefix  = fs.String("topic-prefix", "", "with -source-url: Debezium's topic.prefix, for a -table format with ${topic}")
		progressMode = fs.String("progress", "auto", "progress on standard error: auto (a bar on a terminal, lines otherwise), bar, lines or none")
		progressEach = fs.Duration("progress-interval", 10*time.Second, "with lines: at most one progress line this often (phase changes always print)")
		deletedCol   = fs.String("deleted-column", "", "with -source-url, ClickHouse: the deletion flag column (default: the ReplacingMergeTree's, else is_deleted)")
		consistency  = fs.Int("consistency", 0, "sample the PostgreSQL target this many times while replication runs and check that each sample equals the source as of some source commit (docs/verify.md, Consistency); needs -transaction-topic, -topics (the change-event topics) and -sink-url")
		txnTopic     = fs.String("transaction-topic", "", "with -consistency: Debezium's transaction topic (<topic.prefix>.transaction)")
		consEvery    = fs.Duration("consistency-interval", 200*time.Millisecond, "with -consistency: pause between samples")
		lsnColumn    = fs.String("lsn-column", "__lsn", "with -consistency: the target column holding each row's source LSN (cdc.columns)")
	)
	if err := fs.Parse(args); err != nil {
		return exitVerifyUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "txsink verify: unexpected arguments %q\n", fs.Args())
		return exitVerifyUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	wc, err := wf.load()
	if err != nil {
		fmt.Fprintln(stderr, "txsink verify:", err)
		return exitVerifyUsage
	}
	kopts, err := wc.KafkaOpts()
	if err != nil {
		fmt.Fprintln(stderr, "txsink verify:", err)
		return exitVerifyUsage
	}

	c := verify.Config{
		Bootstrap: wc.Bootstrap,
		KafkaOpts: kopts,
		Sink: verify.SinkOptions{
			TopicColumn: *topicCol, PartitionColumn: *partCol, OffsetColumn: *offsetCol,
			IDColumn: *idColumn,
		},
		PreparedGrace: *grace,
		CheckLag:      *maxLag >= 0,
		MaxLag:        *maxLag,
		FromFirstRow:  *fromFirstRow,
		ScanIdle:      *scanIdle,
		MaxExamples:   *examples,
	}
	if *grace == 0 {
		c.PreparedGrace = -1 // 0 means "none": every prepared transaction is a leftover
	}
	if *cfgPath != "" {
		raw, err := readConnectorFile(*cfgPath)
		if err != nil {
			fmt.Fprintln(stderr, "txsink verify:", err)
			return exitVerifyUsage
		}
		c.Sink.Connector = raw["name"]
		c.Topics = splitList(raw["topics"])
		c.Sink.Table = raw["table.name.format"]
		c.Sink.Schema = raw["table.schema"]
		c.Sink.OffsetsTable = raw["offsets.table"]
		c.Sink.DeadLetterTable = raw["errors.deadletterqueue.table.name"]
		c.Sink.IntentsTable = raw["intents.table"]
		if u := raw["connection.url"]; u != "" {
			if isClickHouseClass(raw["connector.class"]) && !strings.Contains(u, "://") {
				u = "clickhouse://" + u // the connector's host:port form
			}
			if db := raw["connection.database"]; db != "" && isClickHouseClass(raw["connector.class"]) {
				u = withPath(u, db)
			}
			su, err := sinkURLFrom(u, raw["connection.user"], raw["connection.password"])
			if err != nil {
				fmt.Fprintln(stderr, "txsink verify: connection.url:", err)
				return exitVerifyUsage
			}
			c.Sink.URL = su
		}
	}
	// Explicit flags win over the connector file.
	override := func(name string, dst *string, v string) {
		if set[name] {
			*dst = v
		}
	}
	override("connector", &c.Sink.Connector, *connector)
	override("table", &c.Sink.Table, *table)
	override("schema", &c.Sink.Schema, *schema)
	override("offsets-table", &c.Sink.OffsetsTable, *offsetsTable)
	override("dlq-table", &c.Sink.DeadLetterTable, *dlqTable)
	override("intents-table", &c.Sink.IntentsTable, *intentsTable)
	if set["topics"] || len(c.Topics) == 0 {
		c.Topics = splitList(*topics)
	}
	if set["sink-url"] || c.Sink.URL == "" {
		if *sinkURL != "" {
			su, err := sinkURLFrom(*sinkURL, "", "")
			if err != nil {
				fmt.Fprintln(stderr, "txsink verify: -sink-url:", err)
				return exitVerifyUsage
			}
			c.Sink.URL = su
		}
	}
	if *sinkUser != "" || *sinkPassword != "" {
		su, err := sinkURLFrom(c.Sink.URL, *sinkUser, *sinkPassword)
		if err != nil {
			fmt.Fprintln(stderr, "txsink verify: -sink-url:", err)
			return exitVerifyUsage
		}
		c.Sink.URL = su
	}
	if *consistency > 0 {
		co := verify.ConsistencyOptions{Bootstrap: strings.Join(c.Bootstrap, ","), KafkaOpts: c.KafkaOpts, Topics: c.Topics, TxnTopic: *txnTopic,
			SinkURL: c.Sink.URL, Schema: c.Sink.Schema, LSNColumn: *lsnColumn, Samples: *consistency, Interval: *consEvery}
		return runVerifyConsistency(co, *output, *timeout, stdout, stderr)
	}
	if *sourceURL != "" {
		if !set["max-examples"] {
			*examples = 0
		}
		rc := verify.ReplicaConfig{
			SourceURL: *sourceURL, Tables: splitList(*tables), Target: c.Sink, TopicPrefix: *topicPrefix,
			IgnoreColumns: splitList(*ignoreCols), DeletedColumn: *deletedCol, MaxExamples: *examples,
		}
		if rc.Target.Connector != "" {
			rc.Bootstrap = c.Bootstrap
		}
		return runVerifyReplica(rc, *output, *timeout, stdout, stderr)
	}
	c.IDField = *idField
	if c.IDField == "" && *idColumn != "" {
		c.IDField = *idColumn
		if _, f, ok := strings.Cut(*idColumn, "->"); ok {
			c.IDField = strings.TrimSpace(f)
		}
	}
	for _, item := range splitList(*compare) {
		col, field, ok := strings.Cut(item, "=")
		c.Sink.CompareColumns = append(c.Sink.CompareColumns, col)
		if !ok {
			field = col
			if _, f, ok := strings.Cut(col, "->"); ok {
				field = strings.TrimSpace(f)
			}
		}
		c.CompareFields = append(c.CompareFields, field)
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "txsink verify: -output: must be text or json, got %q\n", *output)
		return exitVerifyUsage
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintln(stderr, "txsink verify:", err)
		return exitVerifyUsage
	}
	if *producerLog != "" {
		txns, err := verify.ReadProducerLogFile(*producerLog)
		if err != nil {
			fmt.Fprintln(stderr, "txsink verify:", err)
			return exitVerifyUsage
		}
		c.ProducerLog = txns
	}
	if *history != "" {
		f, err := os.Open(*history)
		if err != nil {
			fmt.Fprintln(stderr, "txsink verify:", err)
			return exitVerifyUsage
		}
		h, err := verify.ReadHistory(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(stderr, "txsink verify:", err)
			return exitVerifyUsage
		}
		c.History = h
	}

	prog, err := newVerifyProgress(*progressMode, stderr, *progressEach)
	if err != nil {
		fmt.Fprintln(stderr, "txsink verify:", err)
		return exitVerifyUsage
	}
	if prog != nil {
		c.Progress = prog.report
		defer prog.end()
	}

	ctx, cancel := auditContext(*timeout)
	defer cancel()
	if err := probeKafka(ctx, c.Bootstrap, c.KafkaOpts); err != nil {
		if ke := wc.ExplainKafkaError(err); ke != err {
			fmt.Fprintln(stderr, "txsink verify:", ke)
			return exitVerifyFailed
		}
	}
	r, err := verify.Check(ctx, c)
	if prog != nil {
		prog.end()
	}
	if err != nil {
		if hint := missingCoordinates(err, c.Sink); hint != "" {
			fmt.Fprintln(stderr, "txsink verify:", hint)
			return exitVerifyFailed
		}
		fmt.Fprintln(stderr, "txsink verify:", wc.ExplainKafkaError(err))
		return exitVerifyFailed
	}
	return writeVerifyReport(r, *output, stdout, stderr)
}

// missingCoordinates explains a sink table without the Kafka coordinate
// columns verify reads (PostgreSQL's undefined_column on one of them), or
// returns "".
func missingCoordinates(err error, o verify.SinkOptions) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42703" {
		return ""
	}
	for _, col := range []string{o.TopicColumn, o.PartitionColumn, o.OffsetColumn} {
		if col == "" || col == "-" || !strings.Contains(pe.Message, `"`+col+`"`) {
			continue
		}
		return fmt.Sprintf("the sink table has no column %q (%v). verify reads each row's Kafka coordinates "+
			"(topic, partition, offset) to find lost, duplicated and aborted records: let the connector write them "+
			"(pk.mode=kafka with auto.create adds __connect_topic, __connect_partition and __connect_offset; "+
			"coordinate columns a table has are always filled), or name the columns that hold them with "+
			"-topic-column, -partition-column and -offset-column (-topic-column - for a table of one topic)", col, err)
	}
	return ""
}

// verifyReport is a report of either kind of check.
type verifyReport interface {
	WriteJSON(io.Writer) error
	WriteText(io.Writer) error
	OK() bool
}

// writeVerifyReport writes the report in the output format and returns
// the exit status it calls for.
func writeVerifyReport(r verifyReport, output string, stdout, stderr io.Writer) int {
	var err error
	if output == "json" {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "txsink verify:", err)
		return exitVerifyFailed
	}
	if !r.OK() {
		return exitVerifyFault
	}
	return exitVerifyOK
}

// runVerifyReplica runs "txsink verify -source-url".
func runVerifyReplica(rc verify.ReplicaConfig, output string, timeout time.Duration, stdout, stderr io.Writer) int {
	if output != "text" && output != "json" {
		fmt.Fprintf(stderr, "txsink verify: -output: must be text or json, got %q\n", output)
		return exitVerifyUsage
	}
	if rc.Target.Table == "" {
		rc.Target.Table = "${source.table}"
	}
	if err := rc.Validate(); err != nil {
		fmt.Fprintln(stderr, "txsink verify:", err)
		return exitVerifyUsage
	}
	ctx, cancel := auditContext(timeout)
	defer cancel()
	r, err := verify.CheckReplica(ctx, rc)
	if err != nil {
		fmt.Fprintln(stderr, "txsink verify:", err)
		if errors.Is(err, verify.ErrReplicaConfig) {
			return exitVerifyUsage
		}
		return exitVerifyFailed
	}
	return writeVerifyReport(r, output, stdout, stderr)
}

// isClickHouseClass reports whether connector.class names the ClickHouse
// sink.
func isClickHouseClass(class string) bool {
	return class == "clickhouse" || class == clickhouse.Class
}

// withPath sets a URL's path (the ClickHouse database).
func withPath(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + db
	return u.String()
}

// sinkURLFrom accepts postgres://, jdbc:postgresql://, clickhouse:// and
// tcp:// (ClickHouse) URLs and applies separate credentials.
func sinkURLFrom(raw, user, password string) (string, error) {
	if raw == "" {
		return "", errors.New("no sink URL to apply credentials to")
	}
	raw = strings.TrimPrefix(raw, "jdbc:")
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme == "postgresql" {
		u.Scheme = "postgres"
	}
	switch u.Scheme {
	case "postgres":
	case "clickhouse", "tcp":
		if _, err := clickhouse.ParseURL(raw); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("want postgres://…, jdbc:postgresql://… or clickhouse://host:port/db, got scheme %q", u.Scheme)
	}
	if user != "" || password != "" {
		name := u.User.Username()
		if user != "" {
			name = user
		}
		pw, _ := u.User.Password()
		if password != "" {
			pw = password
		}
		u.User = url.UserPassword(name, pw)
	}
	return u.String(), nil
}

// runVerifyConsistency runs consistency sampling (-consistency N).
func runVerifyConsistency(o verify.ConsistencyOptions, output string, timeout time.Duration, stdout, stderr io.Writer) int {
	switch {
	case o.TxnTopic == "":
		fmt.Fprintln(stderr, "txsink verify: -consistency needs -transaction-topic")
		return exitVerifyUsage
	case len(o.Topics) == 0:
		fmt.Fprintln(stderr, "txsink verify: -consistency needs -topics: the change-event topics")
		return exitVerifyUsage
	case o.SinkURL == "" || strings.HasPrefix(o.SinkURL, "clickhouse://") || strings.HasPrefix(o.SinkURL, "tcp://"):
		fmt.Fprintln(stderr, "txsink verify: -consistency needs -sink-url of a PostgreSQL target")
		return exitVerifyUsage
	case output != "text" && output != "json":
		fmt.Fprintf(stderr, "txsink verify: -output: must be text or json, got %q\n", output)
		return exitVerifyUsage
	}
	ctx, cancel := auditContext(timeout)
	defer cancel()
	r, err := verify.Consistency(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "txsink verify:", err)
		return exitVerifyFailed
	}
	if output == "json" {
		b, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintln(stdout, string(b))
	} else {
		fmt.Fprintf(stdout, "consistency: %d samples, %d equal to a source commit (%d distinct), %d torn; %d source transactions read\n",
			r.Samples, r.Consistent, r.Prefixes, r.Torn, r.Transactions)
		if t := r.FirstTorn; t != nil {
			fmt.Fprintf(stdout, "first torn sample: %d: transaction %s (commit %d) shown in part, tables %s: %s\n",
				t.Sample, t.Txn, t.Order, strings.Join(t.Tables, ","), t.Detail)
		}
	}
	if !r.OK() {
		return exitVerifyFault
	}
	return exitVerifyOK
}

// auditContext bounds an audit by timeout and ends it on SIGINT or
// SIGTERM.
func auditContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }
}
