package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Delivery guarantees (delivery.guarantee).
const (
	ExactlyOnce     = "exactly_once"
	ExactlyOnceSink = "exactly_once_sink"
	AtLeastOnce     = "at_least_once"
	AtMostOnce      = "at_most_once"
)

// Common connector setting names.
const (
	KeyName              = "name"
	KeyClass             = "connector.class"
	KeyTasksMax          = "tasks.max"
	KeyTopics            = "topics"
	KeyTopicsRegex       = "topics.regex"
	KeyMetadataMaxAgeMs  = "metadata.max.age.ms"
	KeyDelivery          = "delivery.guarantee"
	KeyBatchMaxRecords   = "batch.max.records"
	KeyRoundsInFlight    = "rounds.max.in.flight"
	KeyBatchMaxBytes     = "batch.max.bytes"
	KeyBatchLingerMs     = "batch.linger.ms"
	KeyFetchMaxBytes     = "fetch.max.bytes"
	KeyOffsetsInitial    = "offsets.initial"
	KeyGroupID           = "group.id"
	KeyErrorsTolerance   = "errors.tolerance"
	KeyDLQTopic          = "errors.deadletterqueue.topic.name"
	KeyDLQReplication    = "errors.deadletterqueue.topic.replication.factor"
	KeyDLQContextHeaders = "errors.deadletterqueue.context.headers.enable"
	KeyTxnTimeoutMs      = "transaction.timeout.ms"
	KeySessionTimeoutMs  = "session.timeout.ms"
	KeyUnsafeNoFencing   = "txsink.test.unsafe.disable.fencing"
	KeyUnsafeNoRecovery  = "txsink.test.unsafe.disable.recovery"
	KeyPrepareParallel   = "commit.parallelism"
	KeyRecoveryTimeoutMs = "recovery.timeout.ms"
	KeyShutdownGraceMs   = "shutdown.grace.ms"
	KeySinkTimeoutMs     = "sink.timeout.ms"
	KeySourceTxns        = "source.transactions"
	KeySourceTxnsTopic   = "source.transactions.topic"
	KeySourceTxnsRecords = "source.transactions.max.records"
	KeySourceTxnsWaitMs  = "source.transactions.max.wait.ms"
)

// Values of source.transactions.
const (
	SourceTxnsNone  = "none"
	SourceTxnsWhole = "whole"
)

// ConnectorDefs are the settings every sink connector has.
var ConnectorDefs = Defs{
	{Name: KeyName, Type: String, Required: true, Group: "Common", Doc: "Unique name of the connector.",
		Check: CheckName},
	{Name: KeyClass, Type: String, Required: true, Group: "Common", Doc: "The sink type: a registered sink name (postgres) or its class alias (for example io.txsink.postgres.PostgresSinkConnector)."},
	{Name: KeyTasksMax, Type: Int, Default: "1", Min: 1, Max: 256, Group: "Common", Doc: "Maximum number of tasks (consumers in the connector's group) this worker runs."},
	{Name: KeyTopics, Type: List, Group: "Common", Doc: "Comma-separated Kafka topics to consume. Set this or topics.regex. Not the worker's own topics (config.storage.topic, status.storage.topic, offset.storage.topic), names starting __ (Kafka's own), . or .. (docs/security.md, Internal topics).",
		Check: func(v string) error {
			for _, t := range strings.Split(v, ",") {
				if t = strings.TrimSpace(t); t == "" {
					continue
				}
				if len(t) > 249 || strings.ContainsAny(t, " \t/\\") {
					return fmt.Errorf("invalid topic name %q", t)
				}
			}
			return nil
		}},
	{Name: KeyTopicsRegex, Type: String, Group: "Common", Doc: "Consume every topic whose whole name matches this regular expression (Go's RE2 syntax, which Java's patterns mostly share; anchored at both ends, as Kafka Connect matches), instead of the topics list. Topics created later are picked up at the next metadata refresh (metadata.max.age.ms) without a restart; internal topics are never consumed. A pattern that matches the worker's own topics or a name starting __ is refused unless it matches any name (such as .*): those topics are then never consumed.",
		Check: func(v string) error {
			if _, err := regexp.Compile(v); err != nil {
				return fmt.Errorf("invalid regular expression: %v", err)
			}
			return nil
		}},
	{Name: KeyMetadataMaxAgeMs, Type: Int, Default: "300000", Min: 1000, Max: 86400000, Group: "Common", Doc: "How often a task refreshes the cluster's metadata (Kafka's consumer setting of that name): with topics.regex, how soon a new matching topic is consumed."},
	{Name: KeyDelivery, Type: String, Default: ExactlyOnce, Group: "Delivery", Enum: []string{ExactlyOnce, ExactlyOnceSink, AtLeastOnce, AtMostOnce},
		Doc: "exactly_once: two-phase commit with the Kafka transaction as decision (needs max_prepared_transactions > 0); exactly_once_sink: one sink transaction with compare-and-set offsets and fencing, no Kafka transaction; at_least_once: rows then offsets in separate transactions (a crash can duplicate); at_most_once: offsets then rows (a crash can lose)."},
	{Name: KeyBatchMaxRecords, Type: Int, Default: "100000", Min: 1, Max: 1000000, Group: "Batching", Doc: "Maximum records per round (all partitions of a task). A round pays fixed costs (a Kafka transaction, a PREPARE and a COMMIT PREPARED per partition) that large rounds amortise under a backlog; without one, rounds are cut by batch.linger.ms long before this. A round's records are held in memory (batch.max.bytes bounds them)."},
	{Name: KeyBatchMaxBytes, Type: Int, Default: "16777216", Min: 1024, Max: 1 << 30, Group: "Batching", Doc: "A round stops polling once its record values and keys reach this many bytes (or an eighth of the task's share of the worker's memory budget, memory.budget.bytes, if that is lower; halved while the worker's live heap nears its limit)."},
	{Name: KeyFetchMaxBytes, Type: Int, Default: "0", Min: 0, Max: 1 << 30, Group: "Batching", Doc: "Bytes one fetch from a broker may bring (the Kafka consumer's fetch.max.bytes; a partition's share is at most batch.max.bytes). 0: twice batch.max.bytes, at most an eighth of the task's share of the worker's memory budget (memory.budget.bytes), halved while the worker's live heap nears its limit. Fetched records wait in memory until a round takes them: see the README, Memory."},
	{Name: KeyBatchLingerMs, Type: Int, Default: "50", Min: 0, Max: 60000, Group: "Batching", Doc: "How long a round keeps polling for more records after the first arrive. A round whose first poll already brings a tenth of batch.max.records or more does not linger: a backlog is waiting."},
	{Name: KeyOffsetsInitial, Type: String, Default: "earliest", Enum: []string{"earliest", "latest"}, Group: "Offsets", Doc: "Where a partition with no offset stored in the sink starts."},
	{Name: KeyGroupID, Type: String, Group: "Offsets", Doc: "Kafka consumer group; default txsink-<name>. Its committed offsets mirror the sink's and record the 2PC decision."},
	{Name: KeyErrorsTolerance, Type: String, Default: "none", Enum: []string{"none", "all"}, Group: "Errors", Doc: "none: a bad record stops its task at exactly that offset with the error in the status; all: bad records go to the dead-letter destinations (the sink's dead-letter table, written in the same sink transaction, and/or the dead-letter topic, errors.deadletterqueue.topic.name); at least one must be set."},
	{Name: KeyDLQTopic, Type: String, Group: "Errors", Doc: "Kafka topic for bad records (errors.tolerance=all), as in Kafka Connect: each is produced with its original key, value, headers and timestamp; created when missing (1 partition). exactly_once: produced inside the round's Kafka transaction, the one that records the commit decision, so a dead letter exists exactly when its batch committed (read the topic with isolation.level=read_committed). The other modes produce after the batch commits in the sink (at most once across a crash between the two: see the README, Dead letters). May be set together with the sink's dead-letter table. Not the worker's own topics (config.storage.topic, status.storage.topic, offset.storage.topic), a name starting __ (Kafka's own, such as __consumer_offsets), . or .. (docs/security.md, Internal topics).",
		Check: func(v string) error {
			if len(v) > 249 || strings.ContainsAny(v, " \t/\\,") {
				return fmt.Errorf("invalid topic name %q", v)
			}
			return nil
		}},
	{Name: KeyDLQReplication, Type: Int, Default: "3", Min: -1, Max: 32767, Group: "Errors", Doc: "Replication factor of the dead-letter topic when txsink creates it (-1: the broker's default), as in Kafka Connect. A value of 0 is refused."},
	{Name: KeyDLQContextHeaders, Type: Boolean, Default: "false", Group: "Errors", Doc: "Add Kafka Connect's __connect.errors.* headers to each dead letter: the original topic, partition and offset, connector name, task id, stage, class name, exception class name, message and stack trace."},
	{Name: KeyTxnTimeoutMs, Type: Int, Default: "15000", Min: 1000, Max: 900000, Group: "Delivery", Doc: "Kafka transaction timeout (exactly_once). Bounds how long an abandoned decision blocks recovery."},
	{Name: KeySessionTimeoutMs, Type: Int, Default: "10000", Min: 1000, Max: 300000, Group: "Delivery", Doc: "Consumer group session timeout: after it a silent owner loses its partitions."},
	{Name: KeyRoundsInFlight, Type: Int, Default: "2", Min: 1, Max: 2, Group: "Delivery", Doc: "exactly_once and exactly_once_sink: rounds a task keeps in flight. 2 pipelines them: while round N is prepared, decided and committed, round N+1 is polled, converted and written into open sink transactions (exactly_once: not prepared, its offsets' compare-and-set and PREPARE wait until round N is committed, so recovery's rule is unchanged; exactly_once_sink: its offsets' compare-and-set and COMMIT wait until round N committed; see the README, Pipelined rounds). 1 runs one round at a time. ClickHouse maps round N+1's records into blocks while round N records its intents, decides and inserts. Either way each round's Kafka transaction commits exactly that round's offsets."},
	{Name: KeyPrepareParallel, Type: Int, Default: "4", Min: 1, Max: 64, Group: "Delivery", Doc: "Partition batches prepared and committed in parallel per round."},
	{Name: KeyRecoveryTimeoutMs, Type: Int, Default: "120000", Min: 1000, Max: 3600000, Group: "Delivery", Doc: "How long recovery of in-doubt batches may take on assignment before the task fails."},
	{Name: KeyShutdownGraceMs, Type: Int, Default: "10000", Min: 0, Max: 600000, Group: "Delivery", Doc: "On stop, pause or SIGTERM a task finishes the round in flight (commits or aborts it) and starts no new one; a round still running after this long is abandoned and left to recovery."},
	{Name: KeySinkTimeoutMs, Type: Int, Default: "60000", Min: 1000, Max: 3600000, Group: "Delivery", Doc: "Bounds each write to the sink: a batch's prepare, commit or abort, a local write. A call still running after it is abandoned and its connection closed: a prepare that did not finish aborts the round, a commit that did not finish leaves its batch in doubt for recovery (the sink's records resolve it). It keeps a database that vanished without closing the connection (a dead primary behind a proxy or after a failover, a half-open connection) from holding a task forever."},
	{Name: KeySourceTxns, Type: String, Default: SourceTxnsNone, Enum: []string{SourceTxnsNone, SourceTxnsWhole}, Group: "Source transactions",
		Doc: "whole: apply each source transaction whole, from Debezium's transaction metadata (provide.transaction.metadata=true at the source): a transaction's change events, over every topic and partition, are held until its END and every event it announces have arrived, then written with the offsets of every partition involved and of the transaction topic in one sink transaction, in source commit order, so a reader of the target only sees states the source had. Needs source.transactions.topic, delivery.guarantee=exactly_once_sink, tasks.max=1 and a PostgreSQL sink; rounds are not pipelined. none: every record is applied exactly once, with no regard to source transactions. See docs/cdc.md, Source transactions."},
	{Name: KeySourceTxnsTopic, Type: String, Group: "Source transactions", Doc: "The source connector's transaction topic (Debezium: <topic.prefix>.transaction), consumed beside topics or topics.regex (source.transactions=whole). Its records are not written as rows; their offsets are stored with the transactions they end.",
		Check: func(v string) error {
			if len(v) > 249 || strings.ContainsAny(v, " \t/\\,") {
				return fmt.Errorf("invalid topic name %q", v)
			}
			return nil
		}},
	{Name: KeySourceTxnsRecords, Type: Int, Default: "100000", Min: 2, Max: 10000000, Group: "Source transactions", Doc: "The most records a task holds while it waits for source transactions to complete (source.transactions=whole): the transaction topic may hold this many, each partition of the change topics an equal share of it. A partition at its share is read again later (the task seeks back), so one read far ahead of the others waits for them; a transaction whose events do not fit in their partitions' shares waits for source.transactions.max.wait.ms and is then split. At least 2: the transaction topic must hold a transaction's BEGIN and its END."},
	{Name: KeySourceTxnsWaitMs, Type: Int, Default: "60000", Min: 100, Max: 86400000, Group: "Source transactions", Doc: "How long a source transaction may wait to be complete (source.transactions=whole), from its first record held; after it the transaction is split: applied in parts, with a warning naming it and the metric txsink_source_transactions_split_total (a table of it whose topic is not consumed, a dropped table, a transaction larger than its share of source.transactions.max.records). Counted in ticks of 100 ms."},
	{Name: KeyIgnoreUnsupported, Type: List, Group: "Common", Check: checkIgnoreList,
		Doc: "Settings of the Confluent or Debezium JDBC sink that txsink does not implement and that would change what is written (such as fields.whitelist or db.timezone), which this connector keeps anyway: txsink then runs as if they were absent. Without it such a setting is refused with what to use instead. Name each one (a setting added later is refused until it is named too); see docs/migrating.md."},
	{Name: KeyUnsafeNoFencing, Type: Boolean, Default: "false", Hidden: true, Group: "Testing", Doc: "TEST ONLY: disables the sink's fence and compare-and-set (blind offset writes). Used by negative controls to prove the tests can fail. Never set it in production."},
	{Name: KeyUnsafeNoRecovery, Type: Boolean, Default: "false", Hidden: true, Group: "Testing", Doc: "TEST ONLY: skips the recovery of in-doubt batches on assignment (invariant 7), so a commit whose outcome was lost stays in doubt. Used by negative controls to prove the tests can fail. Never set it in production."},
}

// Connector is the parsed common part of a connector configuration.
type Connector struct {
	Name     string
	Class    string
	TasksMax int
	Topics   []string
	// TopicsRegex, when set, replaces Topics: the whole-name pattern of
	// the topics to consume (TopicsPattern anchors it).
	TopicsRegex     string
	MetadataMaxAge  time.Duration
	Delivery        string
	BatchMaxRecords int
	BatchMaxBytes   int
	// FetchMaxBytes is fetch.max.bytes (0: twice BatchMaxBytes).
	FetchMaxBytes   int
	BatchLinger     time.Duration
	OffsetsInitial  string
	GroupID         string
	ErrorsTolerance string
	// DLQTopic, DLQReplication and DLQContextHeaders are the dead-letter
	// topic's settings (DLQTopic "" when there is none).
	DLQTopic          string
	DLQReplication    int
	DLQContextHeaders bool
	TxnTimeout        time.Duration
	SessionTimeout    time.Duration
	Parallelism       int
	// RoundsInFlight is rounds.max.in.flight: 2 pipelines exactly_once and
	// exactly_once_sink rounds (the next one is written ahead while one
	// is decided and committed).
	RoundsInFlight  int
	RecoveryTimeout time.Duration
	ShutdownGrace   time.Duration
	SinkTimeout     time.Duration
	UnsafeNoFencing bool
	// UnsafeNoRecovery (test only) skips the recovery of in-doubt batches
	// on assignment.
	UnsafeNoRecovery bool
	// SourceTxnsTopic is source.transactions.topic when
	// source.transactions=whole, else "".
	SourceTxnsTopic   string
	SourceTxnsRecords int
	SourceTxnsWait    time.Duration
}

// ParseConnector reads the common settings from validated values.
func ParseConnector(v Values) Connector {
	c := Connector{
		Name:              v[KeyName],
		Class:             v[KeyClass],
		TasksMax:          int(v.Int(KeyTasksMax)),
		Topics:            v.List(KeyTopics),
		TopicsRegex:       strings.TrimSpace(v[KeyTopicsRegex]),
		MetadataMaxAge:    time.Duration(v.Int(KeyMetadataMaxAgeMs)) * time.Millisecond,
		Delivery:          v[KeyDelivery],
		BatchMaxRecords:   int(v.Int(KeyBatchMaxRecords)),
		BatchMaxBytes:     int(v.Int(KeyBatchMaxBytes)),
		FetchMaxBytes:     int(v.Int(KeyFetchMaxBytes)),
		BatchLinger:       time.Duration(v.Int(KeyBatchLingerMs)) * time.Millisecond,
		OffsetsInitial:    v[KeyOffsetsInitial],
		GroupID:           v[KeyGroupID],
		ErrorsTolerance:   v[KeyErrorsTolerance],
		DLQTopic:          v[KeyDLQTopic],
		DLQReplication:    int(v.Int(KeyDLQReplication)),
		DLQContextHeaders: v.Bool(KeyDLQContextHeaders),
		TxnTimeout:        time.Duration(v.Int(KeyTxnTimeoutMs)) * time.Millisecond,
		SessionTimeout:    time.Duration(v.Int(KeySessionTimeoutMs)) * time.Millisecond,
		Parallelism:       int(v.Int(KeyPrepareParallel)),
		RoundsInFlight:    int(v.Int(KeyRoundsInFlight)),
		RecoveryTimeout:   time.Duration(v.Int(KeyRecoveryTimeoutMs)) * time.Millisecond,
		ShutdownGrace:     time.Duration(v.Int(KeyShutdownGraceMs)) * time.Millisecond,
		SinkTimeout:       time.Duration(v.Int(KeySinkTimeoutMs)) * time.Millisecond,
		UnsafeNoFencing:   v.Bool(KeyUnsafeNoFencing),

		UnsafeNoRecovery: v.Bool(KeyUnsafeNoRecovery),
	}
	if v[KeySourceTxns] == SourceTxnsWhole {
		c.SourceTxnsTopic = strings.TrimSpace(v[KeySourceTxnsTopic])
		c.SourceTxnsRecords = int(v.Int(KeySourceTxnsRecords))
		c.SourceTxnsWait = time.Duration(v.Int(KeySourceTxnsWaitMs)) * time.Millisecond
	}
	if c.GroupID == "" {
		c.GroupID = "txsink-" + c.Name
	}
	return c
}

// CheckTopics checks that exactly one of topics and topics.regex is set,
// with Kafka Connect's messages.
func CheckTopics(v Values) Errors {
	hasList, hasRegex := len(v.List(KeyTopics)) > 0, strings.TrimSpace(v[KeyTopicsRegex]) != ""
	switch {
	case hasList && hasRegex:
		return Errors{{Name: KeyTopicsRegex, Msg: "topics and topics.regex are mutually exclusive options, but both are set."}}
	case !hasList && !hasRegex:
		return Errors{{Name: KeyTopics, Msg: "Must configure one of topics or topics.regex"}}
	}
	return nil
}

// CheckSourceTxns checks the settings source.transactions=whole needs.
func CheckSourceTxns(v Values) Errors {
	if v[KeySourceTxns] != SourceTxnsWhole {
		return nil
	}
	var errs Errors
	topic := strings.TrimSpace(v[KeySourceTxnsTopic])
	if topic == "" {
		errs = append(errs, FieldError{Name: KeySourceTxnsTopic, Msg: "source.transactions=whole needs the source connector's transaction topic (Debezium: <topic.prefix>.transaction)"})
	} else if slices.Contains(v.List(KeyTopics), topic) {
		errs = append(errs, FieldError{Name: KeySourceTxnsTopic, Msg: fmt.Sprintf("%q is also in topics: the transaction topic is consumed beside them, never written as rows", topic)})
	}
	if d := v[KeyDelivery]; d != ExactlyOnceSink {
		errs = append(errs, FieldError{Name: KeyDelivery, Msg: fmt.Sprintf("source.transactions=whole writes a round of whole transactions in one sink transaction, which exactly_once_sink does; %s writes each partition in a transaction of its own (see docs/cdc.md)", d)})
	}
	if n := v.Int(KeyTasksMax); n != 1 {
		errs = append(errs, FieldError{Name: KeyTasksMax, Msg: fmt.Sprintf("source.transactions=whole needs every partition a source transaction may touch in one task: set tasks.max=1 (got %d)", n)})
	}
	return errs
}

// kafkaInternalTopics are the broker's own topics a pattern is checked
// against (every name starting __ is refused where a name is given).
var kafkaInternalTopics = []string{"__consumer_offsets", "__transaction_state"}

// wildcardProbes are names a pattern must all match to count as a
// wildcard (".*"), which may match the reserved topics: those are then
// excluded from what it consumes (ExcludedTopics).
var wildcardProbes = []string{"a", "orders", "Z9-x_y.z", "__txsink-probe"}

// ReservedTopicReason says why a connector may not consume or write the
// topic name ("" when it may): "." and "..", a name starting "__" (Kafka's
// own topics, such as __consumer_offsets and __transaction_state), or one
// of worker's topics (name → the worker setting that names it, such as
// config.storage.topic).
func ReservedTopicReason(name string, worker map[string]string) string {
	switch {
	case name == "." || name == "..":
		return fmt.Sprintf("%q is not a topic name", name)
	case strings.HasPrefix(name, "__"):
		return fmt.Sprintf("%q starts with __: names starting __ belong to Kafka itself (such as __consumer_offsets and __transaction_state)", name)
	case worker[name] != "":
		return fmt.Sprintf("%q is this worker's %s", name, worker[name])
	}
	return ""
}

// CheckTopicNames refuses a dead-letter topic or a consumed topic that is
// reserved (ReservedTopicReason): a connector writing to the cluster's
// config or status topic could forge configurations and statuses, and
// one reading them or Kafka's own topics would copy them into a database.
// A topics.regex that matches a reserved name is refused unless it is a
// wildcard (it matches any name, as ".*" does); a task never consumes the
// reserved names it matches (ExcludedTopics). worker maps the worker's
// topics to the settings that name them.
func CheckTopicNames(v Values, worker map[string]string) Errors {
	var errs Errors
	if dlq := strings.TrimSpace(v[KeyDLQTopic]); dlq != "" {
		if why := ReservedTopicReason(dlq, worker); why != "" {
			errs = append(errs, FieldError{Name: KeyDLQTopic, Msg: why + "; a connector may not write dead letters to it"})
		}
	}
	for _, t := range v.List(KeyTopics) {
		if why := ReservedTopicReason(strings.TrimSpace(t), worker); why != "" {
			errs = append(errs, FieldError{Name: KeyTopics, Msg: why + "; a connector may not consume it"})
		}
	}
	if p := strings.TrimSpace(v[KeyTopicsRegex]); p != "" {
		re, err := regexp.Compile("^(?:" + p + ")$")
		if err != nil {
			return errs // the setting's own check reports it
		}
		if name := firstReserved(re, worker); name != "" && !wildcard(re) {
			errs = append(errs, FieldError{Name: KeyTopicsRegex, Msg: fmt.Sprintf("matches %s; a connector may not consume it (a pattern may match it only when it matches any name, such as .*; such a pattern never consumes it)", ReservedTopicReason(name, worker))})
		} else if prefix, _ := re.LiteralPrefix(); strings.HasPrefix(prefix, "__") {
			errs = append(errs, FieldError{Name: KeyTopicsRegex, Msg: "matches only names starting with __, which belong to Kafka itself; a connector may not consume them"})
		}
	}
	return errs
}

// ExcludedTopics returns the regular expressions of the reserved topics a
// topics.regex pattern (anchored) matches, for the consumer to leave out:
// the worker's topics it matches, and every name starting __ when it
// matches one. None when it matches no reserved name.
func ExcludedTopics(pattern string, worker map[string]string) []string {
	re, err := regexp.Compile(pattern)
	if err != nil || pattern == "" {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(worker)) {
		if re.MatchString(name) {
			out = append(out, "^"+regexp.QuoteMeta(name)+"$")
		}
	}
	for _, n := range append([]string{"__txsink-probe"}, kafkaInternalTopics...) {
		if re.MatchString(n) {
			out = append(out, "^__")
			break
		}
	}
	return out
}

func firstReserved(re *regexp.Regexp, worker map[string]string) string {
	names := append([]string{".", ".."}, kafkaInternalTopics...)
	for _, n := range append(names, slices.Sorted(maps.Keys(worker))...) {
		if re.MatchString(n) {
			return n
		}
	}
	return ""
}

func wildcard(re *regexp.Regexp) bool {
	for _, p := range wildcardProbes {
		if !re.MatchString(p) {
			return false
		}
	}
	return true
}

// TopicsPattern returns topics.regex anchored at both ends ("" when
// unset): Kafka Connect matches a topic's whole name, where a Go
// regular expression matches anywhere in it.
func (c Connector) TopicsPattern() string {
	if c.TopicsRegex == "" {
		return ""
	}
	return "^(?:" + c.TopicsRegex + ")$"
}
