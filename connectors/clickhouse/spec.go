package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
)

// Setting names of the ClickHouse sink.
const (
	KeyURL             = "connection.url"
	KeyUser            = "connection.user"
	KeyPassword        = "connection.password"
	KeyDatabase        = "connection.database"
	KeyTableFormat     = "table.name.format"
	KeyPKMode          = "pk.mode"
	KeyPKFields        = "pk.fields"
	KeyDeleteEnabled   = "delete.enabled"
	KeyVersionColumn   = "version.column"
	KeyDeletedColumn   = "deleted.column"
	KeyAutoCreate      = "auto.create"
	KeyAutoEngine      = "auto.create.engine"
	KeyAutoEvolve      = "auto.evolve"
	KeyDLQTable        = "errors.deadletterqueue.table.name"
	KeyOffsetsTable    = "offsets.table"
	KeyIntentsTable    = "intents.table"
	KeyRetentionMs     = "intents.retention.ms"
	KeyBlockRows       = "insert.block.rows"
	KeyDedup           = "insert.deduplication"
	KeyRedoSkipPresent = "redo.skip.present"
)

// Class is the connector.class alias of the ClickHouse sink.
const Class = "io.txsink.clickhouse.ClickHouseSinkConnector"

// Defs are the ClickHouse sink's settings.
var Defs = config.Defs{
	{Name: KeyURL, Type: config.String, Required: true, Group: "Connection", Doc: "Native-protocol address: clickhouse://user:password@host:9000/database (or tcp://…, or the same without a scheme: user:password@host:port). Query parameters: dial_timeout (Go duration), secure (true/false). The password is hidden wherever the URL is shown.",
		Check: func(v string) error { _, err := ParseURL(v); return err }},
	{Name: KeyUser, Type: config.String, Group: "Connection", Doc: "User name; overrides the URL's (default: default)."},
	{Name: KeyPassword, Type: config.Password, Group: "Connection", Doc: "Password; overrides the URL's. Never shown by the API or logs. Bound to the addresses and user it was given with: a configuration change that moves any of them without sending the password again drops it."},
	{Name: KeyDatabase, Type: config.String, Group: "Connection", Doc: "Database of the target, state and dead-letter tables; overrides the URL's path (default: default)."},
	{Name: KeyTableFormat, Type: config.String, Default: "${topic}", Group: "Mapping", Doc: "Target table: ${topic} is replaced by the record's topic (as transforms left it), and for change events ${source.db}, ${source.schema} and ${source.table} by the event's source. One batch may write several tables. Always quoted.",
		Check: record.CheckTableNameFormat},
	{Name: KeyPKMode, Type: config.String, Default: "none", Enum: []string{"none", "kafka", "record_key", "record_value"}, Group: "Mapping", Doc: "kafka: auto.create adds the coordinate columns __connect_topic, __connect_partition, __connect_offset and orders by them. Coordinate columns present in a table are always filled."},
	{Name: KeyPKFields, Type: config.List, Group: "Mapping", Doc: "Key columns: auto.create's ORDER BY, and the fields a tombstone's key fills (delete.enabled)."},
	{Name: KeyDeleteEnabled, Type: config.Boolean, Default: "false", Group: "Mapping", Doc: "Tombstones become deletion rows (deleted.column = 1, version.column = offset) of a ReplacingMergeTree(version, is_deleted) table (ClickHouse 23.2+). Off: a tombstone is a bad record."},
	{Name: KeyVersionColumn, Type: config.String, Group: "Mapping", Doc: "Column filled with the record's Kafka offset, or for a change event its source position (source.lsn for PostgreSQL sources): the version of a ReplacingMergeTree(version) table, so the latest record of a key wins (upsert). Change events need it."},
	{Name: KeyDeletedColumn, Type: config.String, Default: "is_deleted", Group: "Mapping", Doc: "UInt8 column set to 1 by tombstones when delete.enabled."},
	{Name: KeyAutoCreate, Type: config.Boolean, Default: "false", Group: "Mapping", Doc: "Create a missing target table from the first record that writes it: a column per value field, typed from the record's schema (schemaless JSON: String, Int64, Float64, UInt8; objects and arrays as JSON text in String). A change event's table is a ReplacingMergeTree(version.column, deleted.column) ordered by the event's key. See docs/schema-evolution.md."},
	{Name: KeyAutoEvolve, Type: config.Boolean, Default: "false", Group: "Mapping", Doc: "Add a column (ALTER TABLE … ADD COLUMN IF NOT EXISTS, nullable, with a DEFAULT) for a value field the table lacks, before the batch's intent; idempotent on a redo. Columns are never dropped or changed. See docs/schema-evolution.md."},
	{Name: KeyAutoEngine, Type: config.String, Group: "Mapping", Doc: "ENGINE of auto-created tables, e.g. ReplacingMergeTree(version): one of MergeTree, ReplacingMergeTree, SummingMergeTree, AggregatingMergeTree, CollapsingMergeTree, VersionedCollapsingMergeTree or their Replicated* forms, with column names and, for Replicated*, a ZooKeeper path and replica name as arguments; nothing else (no SETTINGS, AS SELECT or table functions). Default: MergeTree (ReplacingMergeTree with version.column), made Replicated* with a ZooKeeper path when the server has no de-duplication tokens and exactly_once needs it."},
	{Name: KeyDLQTable, Type: config.String, Group: "Errors", Doc: "Dead-letter table (errors.tolerance=all; required unless errors.deadletterqueue.topic.name is set, and both may be); created if missing, with a de-duplicating engine; written with the batch's de-dup token."},
	{Name: KeyOffsetsTable, Type: config.String, Default: "txsink_offsets", Group: "Offsets", Doc: "Table holding next_offset and fence per partition (ReplacingMergeTree); created if missing."},
	{Name: KeyIntentsTable, Type: config.String, Default: "txsink_intents", Group: "Offsets", Doc: "Intent log of exactly_once batches (ReplacingMergeTree); created if missing."},
	{Name: KeyRetentionMs, Type: config.Long, Default: "604800000", Min: 0, Max: 1 << 40, Group: "Offsets", Doc: "Resolved intents (done, aborted, fenced) prepared longer ago than this are deleted in the background, except the latest intent of each partition and anything prepared since the oldest intent still in doubt (docs/clickhouse.md, \"Intent retention\"). 0 keeps every intent."},
	{Name: KeyBlockRows, Type: config.Int, Default: "100000", Min: 1, Max: 10000000, Group: "Batching", Doc: "Maximum rows per INSERT block. A round's rows of each table, from all its partitions, are inserted in blocks of this size (recorded in its intents, so a redo cuts the same blocks). Rows per insert are bounded by batch.max.records: keep that at 10000 or more."},
	{Name: KeyDedup, Type: config.String, Default: "auto", Enum: []string{"auto", "token", "blocks"}, Group: "Delivery", Doc: "auto: insert_deduplication_token where the server has it, else identical blocks into a Replicated*MergeTree table; token or blocks force one (preflight refuses what the server and table cannot do)."},
	{Name: KeyRedoSkipPresent, Type: config.Boolean, Default: "true", Group: "Delivery", Doc: "On a redo into a table with the coordinate columns, skip blocks whose rows are already present instead of relying on the de-duplication window."},
}

// Config is the ClickHouse sink's configuration.
type Config struct {
	Connector       string
	Topics          []string
	Delivery        string
	Addr            []string
	Database        string
	User, Password  string
	DialTimeout     time.Duration
	Secure          bool
	TableNameFormat string
	PKMode          string
	PKFields        []string
	DeleteEnabled   bool
	VersionColumn   string
	DeletedColumn   string
	AutoCreate      bool
	AutoEngine      string
	AutoEvolve      bool
	// CDCColumns are the change columns auto.create adds (cdc.columns).
	CDCColumns []string
	// TruncateApply: cdc.truncate=apply, which this sink refuses.
	TruncateApply   bool
	ErrorsTolerance string
	DLQTable        string
	// DLQTopic is the runtime's dead-letter topic, an alternative to
	// DLQTable: the runtime has the dead letters (connectors.Converted).
	DLQTopic        string
	OffsetsTable    string
	IntentsTable    string
	IntentRetention time.Duration // intents.retention.ms; 0 keeps every intent
	BlockRows       int
	Dedup           string
	RedoSkipPresent bool
	// UnsafeNoFencing (test only) switches off the fence checks, the
	// intent-state checks and insert de-duplication: the negative control
	// of the zombie tests.
	UnsafeNoFencing bool
}

// Validate checks cross-field rules and returns the first problem; every
// message starts with the offending setting.
func (c Config) Validate() error {
	if errs := c.problems(); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// problems returns every cross-field problem, each message starting with
// the offending setting.
func (c Config) problems() []error {
	var errs []error
	if c.ErrorsTolerance == "all" && c.DLQTable == "" && c.DLQTopic == "" {
		errs = append(errs, errors.New(KeyDLQTable+": required when errors.tolerance=all (or set "+config.KeyDLQTopic+")"))
	}
	if c.TruncateApply {
		errs = append(errs, errors.New(convert.KeyCDCTruncate+": apply is not supported by the ClickHouse sink (a TRUNCATE cannot be part of a batch's idempotent redo); use refuse"))
	}
	if c.DeleteEnabled && c.VersionColumn == "" {
		errs = append(errs, errors.New(KeyDeleteEnabled+": needs version.column (the ReplacingMergeTree version that orders a deletion after the row it deletes)"))
	}
	if c.DeleteEnabled && c.DeletedColumn == "" {
		errs = append(errs, errors.New(KeyDeletedColumn+": required when delete.enabled"))
	}
	if c.PKMode == "kafka" && len(c.PKFields) != 0 {
		errs = append(errs, errors.New(KeyPKFields+": must be empty with pk.mode=kafka (the coordinate columns are the key)"))
	}
	for _, name := range []string{c.Database, c.OffsetsTable, c.IntentsTable, c.DLQTable} {
		if strings.ContainsAny(name, "\x00`") {
			errs = append(errs, fmt.Errorf("%s: %q must not contain NUL or backquotes", KeyDatabase, name))
			break
		}
	}
	return errs
}

// ErrURL is wrapped by every error about connection.url.
var ErrURL = errors.New("invalid connection.url")

// ParseURL validates connection.url (clickhouse://user:password@host:port/db,
// tcp://…, or the same without a scheme) and returns the addresses,
// database, user and password it names. Its errors never quote the user
// information.
func ParseURL(raw string) (*url.URL, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		s = "clickhouse://" + s
	}
	if strings.ContainsAny(s, "#\x00") {
		return nil, fmt.Errorf("%w: '#' and NUL are not allowed (percent-encode a '#' in a password as %%23)", ErrURL)
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: not a URL; want clickhouse://user:password@host:9000/database, with special characters of the user and password percent-encoded", ErrURL)
	}
	if u.Scheme != "clickhouse" && u.Scheme != "tcp" {
		return nil, fmt.Errorf("%w: must look like clickhouse://host:9000/database (native protocol; HTTP is not supported)", ErrURL)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%w: no host in %q", ErrURL, connectors.RedactURL(raw))
	}
	for _, h := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("%w: address %q: want host:port", ErrURL, h)
		}
	}
	for k, vs := range u.Query() {
		switch k {
		case "dial_timeout":
			if _, err := time.ParseDuration(vs[0]); err != nil {
				return nil, fmt.Errorf("%w: dial_timeout: %v", ErrURL, err)
			}
		case "secure":
		default:
			return nil, fmt.Errorf("%w: connection parameter %q is not allowed (allowed: dial_timeout, secure)", ErrURL, k)
		}
	}
	return u, nil
}

// ParseConfig builds the sink's Config from validated settings; the error
// is the first problem.
func ParseConfig(c config.Connector, v config.Values) (Config, error) {
	cfg, errs := parseConfig(c, v)
	if len(errs) > 0 {
		return Config{}, errs[0]
	}
	return cfg, nil
}

// parseConfig builds the sink's Config and returns every problem of the
// settings, each message starting with the offending setting.
func parseConfig(c config.Connector, v config.Values) (Config, []error) {
	var errs []error
	u, err := ParseURL(v[KeyURL])
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", KeyURL, err))
		u = &url.URL{}
	}
	engine, err := ParseEngine(v[KeyAutoEngine])
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", KeyAutoEngine, err))
	}
	cfg := Config{
		Connector:       c.Name,
		Topics:          c.Topics,
		Delivery:        c.Delivery,
		Addr:            strings.Split(u.Host, ","),
		Database:        strings.Trim(u.Path, "/"),
		DialTimeout:     10 * time.Second,
		TableNameFormat: v[KeyTableFormat],
		PKMode:          v[KeyPKMode],
		PKFields:        v.List(KeyPKFields),
		DeleteEnabled:   v.Bool(KeyDeleteEnabled),
		VersionColumn:   v[KeyVersionColumn],
		DeletedColumn:   v[KeyDeletedColumn],
		AutoCreate:      v.Bool(KeyAutoCreate),
		AutoEngine:      engine,
		AutoEvolve:      v.Bool(KeyAutoEvolve),
		CDCColumns:      v.List(convert.KeyCDCColumns),
		TruncateApply:   v[convert.KeyCDCTruncate] == convert.CDCTruncateApply,
		ErrorsTolerance: c.ErrorsTolerance,
		DLQTable:        v[KeyDLQTable],
		DLQTopic:        v[config.KeyDLQTopic],
		OffsetsTable:    v[KeyOffsetsTable],
		IntentsTable:    v[KeyIntentsTable],
		IntentRetention: time.Duration(v.Int(KeyRetentionMs)) * time.Millisecond,
		BlockRows:       int(v.Int(KeyBlockRows)),
		Dedup:           v[KeyDedup],
		RedoSkipPresent: v.Bool(KeyRedoSkipPresent),
		UnsafeNoFencing: c.UnsafeNoFencing,
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	if d := u.Query().Get("dial_timeout"); d != "" {
		cfg.DialTimeout, _ = time.ParseDuration(d)
	}
	cfg.Secure = u.Query().Get("secure") == "true"
	if s := v[KeyUser]; s != "" {
		cfg.User = s
	}
	if s := v[KeyPassword]; s != "" {
		cfg.Password = s
	}
	if s := v[KeyDatabase]; s != "" {
		cfg.Database = s
	}
	if cfg.Database == "" {
		cfg.Database = "default"
	}
	if cfg.User == "" {
		cfg.User = "default"
	}
	if cfg.TableNameFormat == "" {
		cfg.TableNameFormat = "${topic}"
	}
	if cfg.BlockRows <= 0 {
		cfg.BlockRows = 100000
	}
	return cfg, append(errs, cfg.problems()...)
}

// Spec returns the registry entry of the ClickHouse sink.
func Spec() connectors.Spec {
	return connectors.Spec{
		Name:     "clickhouse",
		Class:    Class,
		Version:  "1.0",
		Defs:     Defs,
		Validate: validate,
		Identity: identity,
		New:      open,
	}
}

// validate returns every problem of the sink's settings at once.
func validate(v config.Values, _ connectors.Policy) config.Errors {
	_, problems := parseConfig(config.ParseConnector(v), v)
	var errs config.Errors
	for _, err := range problems {
		name := KeyURL
		if i := strings.Index(err.Error(), ":"); i > 0 && !strings.Contains(err.Error()[:i], " ") {
			name = err.Error()[:i]
		}
		errs = append(errs, config.FieldError{Name: name, Msg: err.Error()})
	}
	return errs
}

// identity is what a stored password is bound to: the user, the
// addresses, and whether the connection is TLS (secure). Turning secure
// off, or on, without sending the password again drops it.
func identity(v config.Values) (string, error) {
	cfg, err := ParseConfig(config.ParseConnector(v), v)
	if err != nil {
		return "", err
	}
	addrs := slices.Clone(cfg.Addr)
	slices.Sort(addrs)
	return fmt.Sprintf("%s@%s (secure=%t)", cfg.User, strings.Join(addrs, ","), cfg.Secure), nil
}

func (c Config) options() *clickhouse.Options {
	o := &clickhouse.Options{
		Addr:        c.Addr,
		Protocol:    clickhouse.Native,
		Auth:        clickhouse.Auth{Database: c.Database, Username: c.User, Password: c.Password},
		DialTimeout: c.DialTimeout,
		ReadTimeout: 5 * time.Minute,
		ClientInfo:  clickhouse.ClientInfo{Products: []struct{ Name, Version string }{{Name: "txsink", Version: "1"}}},
	}
	if c.Secure {
		o.TLS = tlsConfig()
	}
	return o
}

func open(ctx context.Context, env connectors.Env, c config.Connector, v config.Values) (connectors.Sink, error) {
	cfg, err := ParseConfig(c, v)
	if err != nil {
		return nil, err
	}
	return Open(ctx, env, cfg)
}
