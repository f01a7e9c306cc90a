package config

import (
	"fmt"
	"strings"
)

// ForeignKind says what txsink does with another connector's setting.
type ForeignKind int

// Kinds of foreign settings.
const (
	// Native: txsink defines a setting of that name with the same
	// meaning (for the sinks that define it).
	Native ForeignKind = iota
	// Redundant: txsink has no such setting and needs none (its runtime
	// does what the setting asks, or the setting concerns a database or
	// a pool txsink does not use); it is accepted and has no effect.
	Redundant
	// Unsupported: ignoring the setting would change what is written, so
	// it is refused with what to use instead, unless its value is what
	// txsink does anyway (Same) or the connector lists it in
	// config.ignore.unsupported.
	Unsupported
)

// Vendors of the foreign settings.
const (
	Confluent = "Confluent JDBC sink"
	Debezium  = "Debezium JDBC sink"
)

// ForeignKey is a setting of the Confluent or Debezium JDBC sink connector
// and what it becomes in txsink.
type ForeignKey struct {
	Name    string
	Vendors []string
	Kind    ForeignKind
	// Same, for an Unsupported setting, reports the values (trimmed) with
	// which txsink writes what the vendor's connector writes: those are
	// accepted as Redundant.
	Same func(v string) bool
	// Advice is txsink's equivalent, or why none is needed.
	Advice string
	// Prefix: Name is a family of settings (connection., hibernate.).
	Prefix bool
}

func (f ForeignKey) refusal() string {
	return fmt.Sprintf("a setting of the %s that txsink does not implement, and ignoring it would change what is written: %s (to run without it anyway, add it to %s; see %s)",
		strings.Join(f.Vendors, " and the "), f.Advice, KeyIgnoreUnsupported, MigrationPage)
}

// LookupForeign finds a foreign setting by exact name.
func LookupForeign(name string) (ForeignKey, bool) {
	for _, f := range ForeignKeys {
		if !f.Prefix && f.Name == name {
			return f, true
		}
	}
	return ForeignKey{}, false
}

// foreignPrefix returns the foreign family a name belongs to, or nil.
func foreignPrefix(name string) *ForeignKey {
	for i, f := range ForeignKeys {
		if f.Prefix && strings.HasPrefix(name, f.Name) && len(name) > len(f.Name) {
			return &ForeignKeys[i]
		}
	}
	return nil
}

func is(values ...string) func(string) bool {
	return func(v string) bool {
		for _, want := range values {
			if strings.EqualFold(v, want) {
				return true
			}
		}
		return false
	}
}

var (
	both       = []string{Confluent, Debezium}
	confluent  = []string{Confluent}
	debezium   = []string{Debezium}
	replaceFld = "transforms=<alias>, transforms.<alias>.type=org.apache.kafka.connect.transforms.ReplaceField$Value"
)

// ForeignKeys are the documented settings of the Confluent JDBC sink
// (io.confluent.connect.jdbc.JdbcSinkConnector, 10.x) and of the Debezium
// JDBC sink (io.debezium.connector.jdbc.JdbcSinkConnector, 2.x and 3.x),
// besides Kafka Connect's own, each with what it becomes in txsink.
// docs/migrating.md lists every one of them (a test checks it).
var ForeignKeys = []ForeignKey{
	// Settings txsink defines under the same name.
	{Name: "connection.url", Vendors: both, Kind: Native, Advice: "the same: a jdbc:postgresql:// URL is read as it is (for the ClickHouse sink, a clickhouse:// address)"},
	{Name: "connection.user", Vendors: confluent, Kind: Native, Advice: "the same"},
	{Name: "connection.password", Vendors: both, Kind: Native, Advice: "the same"},
	{Name: "insert.mode", Vendors: both, Kind: Native, Advice: "the same for insert and upsert (PostgreSQL sink); update is refused: use upsert"},
	{Name: "delete.enabled", Vendors: both, Kind: Native, Advice: "the same: tombstones delete by key (needs pk.mode=record_key)"},
	{Name: "table.name.format", Vendors: both, Kind: Native, Advice: "the same: ${topic}, and for change events ${source.db}, ${source.schema}, ${source.table}"},
	{Name: "pk.mode", Vendors: confluent, Kind: Native, Advice: "the same: none, kafka, record_key, record_value"},
	{Name: "pk.fields", Vendors: confluent, Kind: Native, Advice: "the same"},
	{Name: "auto.create", Vendors: confluent, Kind: Native, Advice: "the same: creates a missing table from the first record, in the batch's transaction"},
	{Name: "auto.evolve", Vendors: confluent, Kind: Native, Advice: "the same: adds nullable columns, never drops or narrows one"},

	// Confluent JDBC sink.
	{Name: "connection.attempts", Vendors: confluent, Kind: Redundant, Advice: "not needed: a task that cannot reach the database waits and retries by itself with a growing backoff, showing the cause in its status"},
	{Name: "connection.backoff.ms", Vendors: confluent, Kind: Redundant, Advice: "not needed: see connection.attempts"},
	{Name: "dialect.name", Vendors: confluent, Kind: Unsupported, Same: is("", "PostgreSqlDatabaseDialect"),
		Advice: "txsink's postgres sink writes PostgreSQL only (the value PostgreSqlDatabaseDialect is accepted); for ClickHouse use connector.class=clickhouse"},
	{Name: "batch.size", Vendors: both, Kind: Unsupported, Advice: "use batch.max.records (records per round, one transaction per partition) and batch.max.bytes"},
	{Name: "table.types", Vendors: confluent, Kind: Unsupported, Same: is("TABLE"), Advice: "txsink writes tables (the value TABLE is accepted); it does not write through views"},
	{Name: "fields.whitelist", Vendors: confluent, Kind: Unsupported, Same: is(""),
		Advice: "keep only some value fields with a ReplaceField transform: " + replaceFld + ", transforms.<alias>.include=<fields>"},
	{Name: "db.timezone", Vendors: confluent, Kind: Unsupported, Same: is("UTC", "Z", "Etc/UTC"),
		Advice: "txsink writes timestamps as UTC instants (timestamptz) or UTC wall times (timestamp), as db.timezone=UTC does (that value is accepted); convert in SQL with AT TIME ZONE"},
	{Name: "db.timezone.date", Vendors: confluent, Kind: Unsupported, Same: is("NONE"), Advice: "txsink writes Date values as dates, with no zone (the value NONE is accepted)"},
	{Name: "date.timezone", Vendors: confluent, Kind: Unsupported, Same: is("DB_TIMEZONE", "UTC"), Advice: "txsink writes dates in UTC, which DB_TIMEZONE and UTC both mean with db.timezone=UTC (those values are accepted)"},
	{Name: "quote.sql.identifiers", Vendors: confluent, Kind: Unsupported, Same: is("always"),
		Advice: "txsink always quotes table and column names, so they keep their case (the value always is accepted); to write lower-case names, lower-case them with table.name.format or a ReplaceField transform's renames"},
	{Name: "mssql.use.merge.holdlock", Vendors: confluent, Kind: Redundant, Advice: "not needed: SQL Server only"},
	{Name: "max.retries", Vendors: confluent, Kind: Redundant, Advice: "not needed: a round that fails for a retryable reason is retried without limit (nothing is skipped); a bad record is handled by errors.tolerance"},
	{Name: "retry.backoff.ms", Vendors: confluent, Kind: Redundant, Advice: "not needed: see max.retries"},
	{Name: "trim.sensitive.log", Vendors: confluent, Kind: Redundant, Advice: "not needed: txsink does not log record contents, and it redacts secrets (docs/security.md)"},
	{Name: "replace.null.with.default", Vendors: confluent, Kind: Unsupported, Same: is("false"),
		Advice: "txsink writes a null field as NULL, as replace.null.with.default=false does (that value is accepted); to write a default, give the column a DEFAULT and leave the field out with a ReplaceField transform"},
	{Name: "timestamp.precision.mode", Vendors: confluent, Kind: Unsupported, Same: is("microseconds"),
		Advice: "txsink writes timestamps with PostgreSQL's microsecond precision (the value microseconds is accepted)"},
	{Name: "timestamp.fields.list", Vendors: confluent, Kind: Unsupported, Same: is(""),
		Advice: "convert string fields to timestamps with a TimestampConverter transform: transforms.<alias>.type=org.apache.kafka.connect.transforms.TimestampConverter$Value, transforms.<alias>.field=<field>, transforms.<alias>.target.type=Timestamp"},
	{Name: "jdbc.credentials.provider.class", Vendors: confluent, Kind: Unsupported, Same: is("io.confluent.connect.jdbc.util.DefaultJdbcCredentialsProvider"),
		Advice: "give connection.user and connection.password (what the default provider, accepted, reads), or references to a config provider (${file:…}, ${env:…}, ${dir:…}; docs/cluster.md)"},
	{Name: "connection.", Prefix: true, Vendors: confluent, Kind: Redundant,
		Advice: "JDBC driver properties (connection.<property>) have no effect: set the connection's parameters in connection.url's query string (see its allowed parameters)"},

	// Debezium JDBC sink.
	{Name: "connection.provider", Vendors: debezium, Kind: Redundant, Advice: "not needed: txsink has its own connection pool (connection.pool.size)"},
	{Name: "connection.username", Vendors: debezium, Kind: Unsupported, Advice: "use connection.user"},
	{Name: "connection.pool.min_size", Vendors: debezium, Kind: Redundant, Advice: "not needed: the pool opens connections as it needs them"},
	{Name: "connection.pool.max_size", Vendors: debezium, Kind: Redundant, Advice: "use connection.pool.size (PostgreSQL sink)"},
	{Name: "connection.pool.acquire_increment", Vendors: debezium, Kind: Redundant, Advice: "not needed: see connection.pool.min_size"},
	{Name: "connection.pool.timeout", Vendors: debezium, Kind: Redundant, Advice: "not needed: sink.timeout.ms bounds each write"},
	{Name: "connection.restart.on.errors", Vendors: debezium, Kind: Redundant, Advice: "not needed: txsink reconnects by itself, and a failover neither loses nor duplicates a row (exactly_once)"},
	{Name: "truncate.enabled", Vendors: debezium, Kind: Unsupported,
		Advice: "use cdc.truncate: apply empties the table (truncate.enabled=true); refuse, the default, makes a truncate event a bad record handled by errors.tolerance (Debezium skips it when false)"},
	{Name: "collection.name.format", Vendors: debezium, Kind: Unsupported, Same: is("${topic}"), Advice: "use table.name.format (${topic}, its default, is accepted), which takes ${topic}, ${source.db}, ${source.schema} and ${source.table}"},
	{Name: "primary.key.mode", Vendors: debezium, Kind: Unsupported, Same: is("none"), Advice: "use pk.mode (none, kafka, record_key, record_value); change events always take their key from the record key"},
	{Name: "primary.key.fields", Vendors: debezium, Kind: Unsupported, Same: is(""), Advice: "use pk.fields"},
	{Name: "schema.evolution", Vendors: debezium, Kind: Unsupported, Same: is("none"), Advice: "basic: set auto.create=true and auto.evolve=true (the value none is what txsink does by default, and is accepted)"},
	{Name: "quote.identifiers", Vendors: debezium, Kind: Unsupported, Same: is("true"),
		Advice: "txsink always quotes table and column names (the value true is accepted); to write lower-case names, lower-case them with table.name.format or a ReplaceField transform's renames"},
	{Name: "table.naming.strategy", Vendors: debezium, Kind: Unsupported, Same: is("io.debezium.connector.jdbc.naming.DefaultTableNamingStrategy"), Advice: "the default strategy is accepted; otherwise use table.name.format (${topic}, ${source.db}, ${source.schema}, ${source.table}) or a RegexRouter transform"},
	{Name: "collection.naming.strategy", Vendors: debezium, Kind: Unsupported, Same: is("io.debezium.sink.naming.DefaultCollectionNamingStrategy"), Advice: "the default strategy is accepted; otherwise use table.name.format (${topic}, ${source.db}, ${source.schema}, ${source.table}) or a RegexRouter transform"},
	{Name: "column.naming.strategy", Vendors: debezium, Kind: Unsupported, Same: is("io.debezium.connector.jdbc.naming.DefaultColumnNamingStrategy"), Advice: "the default strategy is accepted; otherwise rename columns with a ReplaceField transform: " + replaceFld + ", transforms.<alias>.renames=<old>:<new>,…"},
	{Name: "database.time_zone", Vendors: debezium, Kind: Unsupported, Same: is("UTC", "Z", "Etc/UTC"), Advice: "txsink writes timestamps in UTC (the value UTC is accepted); convert in SQL with AT TIME ZONE"},
	{Name: "use.time.zone", Vendors: debezium, Kind: Unsupported, Same: is("UTC", "Z", "Etc/UTC"), Advice: "txsink writes timestamps in UTC (the value UTC is accepted); convert in SQL with AT TIME ZONE"},
	{Name: "dialect.postgres.postgis.schema", Vendors: debezium, Kind: Redundant, Advice: "not needed: txsink creates no PostGIS columns"},
	{Name: "dialect.sqlserver.identity.insert", Vendors: debezium, Kind: Redundant, Advice: "not needed: SQL Server only"},
	{Name: "field.include.list", Vendors: debezium, Kind: Unsupported, Same: is(""),
		Advice: "keep only some value fields with a ReplaceField transform: " + replaceFld + ", transforms.<alias>.include=<fields> (a predicate limits it to some topics)"},
	{Name: "field.exclude.list", Vendors: debezium, Kind: Unsupported, Same: is(""),
		Advice: "drop value fields with a ReplaceField transform: " + replaceFld + ", transforms.<alias>.exclude=<fields> (a predicate limits it to some topics)"},
	{Name: "flush.max.retries", Vendors: debezium, Kind: Redundant, Advice: "not needed: a round that fails for a retryable reason is retried without limit (nothing is skipped)"},
	{Name: "flush.retry.delay.ms", Vendors: debezium, Kind: Redundant, Advice: "not needed: see flush.max.retries"},
	{Name: "use.reduction.buffer", Vendors: debezium, Kind: Redundant, Advice: "not needed: a round's changes are applied in one transaction per partition, so readers never see its intermediate states"},
	{Name: "hibernate.", Prefix: true, Vendors: debezium, Kind: Redundant, Advice: "Hibernate's settings (hibernate.<property>) have no effect: txsink does not use Hibernate"},
}
