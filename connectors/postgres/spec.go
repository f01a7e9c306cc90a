package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/record"
)

// Setting names of the PostgreSQL sink.
const (
	KeyURL           = "connection.url"
	KeyUser          = "connection.user"
	KeyPassword      = "connection.password"
	KeyPoolSize      = "connection.pool.size"
	KeyIdleTxTimeout = "connection.idle.transaction.timeout.ms"
	KeySchema        = "table.schema"
	KeyTableFormat   = "table.name.format"
	KeyInsertMode    = "insert.mode"
	KeyPKMode        = "pk.mode"
	KeyPKFields      = "pk.fields"
	KeyDeleteEnabled = "delete.enabled"
	KeyDLQTable      = "errors.deadletterqueue.table.name"
	KeyOffsetsTable  = "offsets.table"
	KeyAutoCreate    = "auto.create"
	KeyAutoEvolve    = "auto.evolve"
)

// Class is the connector.class alias of the PostgreSQL sink.
const Class = "io.txsink.postgres.PostgresSinkConnector"

// Defs are the PostgreSQL sink's settings.
var Defs = config.Defs{
	{Name: KeyURL, Type: config.String, Required: true, Group: "Connection", Doc: "PostgreSQL URL (postgres://user@host:port/db?sslmode=…) or JDBC URL (jdbc:postgresql://host:port/db?user=…), read by the driver's own parser. Allowed query parameters: " + strings.Join(allowedURLParams, ", ") + "; options may only set session settings (-c name=value) of an allowlist, and never one that weakens durability (synchronous_commit=off). A Unix-domain socket or an empty host is refused unless the worker sets connection.unix.socket.enabled. See docs/security.md.",
		Check: func(v string) error {
			// What the worker's policy does not change; validate checks the rest.
			_, err := ParseConnString(v, connectors.Policy{UnixSockets: true})
			return err
		}},
	{Name: KeyUser, Type: config.String, Group: "Connection", Doc: "User name; overrides the URL's. One of the two is required unless the worker lets this host use its environment credentials (connection.env.credentials.hosts)."},
	{Name: KeyPassword, Type: config.Password, Group: "Connection", Doc: "Password; overrides the URL's. Never shown by the API or logs. Bound to the host, port and user it was given with: a configuration change that moves any of them without sending the password again drops it."},
	{Name: KeyPoolSize, Type: config.Int, Default: "16", Min: 2, Max: 256, Group: "Connection", Doc: "Maximum connections to the database. Pipelined rounds (rounds.max.in.flight=2) keep the next round written ahead in open transactions, one connection per batch (exactly_once_sink) or per transaction of the round (exactly_once: up to commit.parallelism), up to this less tasks.max × max(commit.parallelism, 4) less 1 (11 at the defaults); a batch that finds none free is written in its round; with none at all, rounds are not pipelined (a warning says so)."},
	{Name: KeyIdleTxTimeout, Type: config.Int, Default: "30000", Min: 1000, Max: 3600000, Group: "Connection", Doc: "PostgreSQL's idle_in_transaction_session_timeout for the sink's sessions: the server ends a session that stays idle inside an open transaction this long, releasing its locks. It bounds how long an owner frozen inside a transaction (a paused VM, a SIGSTOPped process, a network partition) can hold the offsets rows its partitions' new owner must fence; prepared transactions belong to no session and are resolved by recovery instead. Keep it well above the time a round spends converting records between statements."},
	{Name: KeySchema, Type: config.String, Default: "public", Group: "Mapping", Doc: "Schema of the target tables, the offsets table and the dead-letter table."},
	{Name: KeyTableFormat, Type: config.String, Default: "${topic}", Group: "Mapping", Doc: "Target table name: ${topic} is replaced by the record's topic (as transforms left it), and for change events ${source.db}, ${source.schema} and ${source.table} by the event's source. One batch may write several tables, all in its transaction. Always quoted.",
		Check: record.CheckTableNameFormat},
	{Name: KeyInsertMode, Type: config.String, Default: "insert", Enum: []string{"insert", "upsert"}, Group: "Mapping", Doc: "insert: COPY (a rewound range is written again); upsert: INSERT … ON CONFLICT (pk) DO UPDATE (a rewound range replaces rows). Change events (cdc.format) are always applied by key, as upserts and deletes."},
	{Name: KeyPKMode, Type: config.String, Default: "none", Enum: []string{"none", "record_key", "record_value", "kafka"}, Group: "Mapping", Doc: "Where primary key values come from. Change events always take theirs from the record key (record_key is implied for them)."},
	{Name: KeyPKFields, Type: config.List, Group: "Mapping", Doc: "Primary key columns (required for upsert with record_key or record_value)."},
	{Name: KeyDeleteEnabled, Type: config.Boolean, Default: "false", Group: "Mapping", Doc: "Tombstones (null values) delete the row with the record's key (needs pk.mode=record_key)."},
	{Name: KeyDLQTable, Type: config.String, Group: "Errors", Doc: "Dead-letter table (errors.tolerance=all; required unless errors.deadletterqueue.topic.name is set, and both may be), written in the same transaction as the rows; created if missing."},
	{Name: KeyOffsetsTable, Type: config.String, Default: "txsink_offsets", Group: "Offsets", Doc: "Table holding next_offset and fence per partition; created if missing, with <name>_rounds beside it (the batches of each prepared transaction that holds several: docs/operations.md). At most 56 bytes."},
	{Name: KeyAutoCreate, Type: config.Boolean, Default: "false", Group: "Schema", Doc: "Create a missing target table from the first record that writes it: its key (record_key, change events) or coordinate columns (kafka) as PRIMARY KEY, a column per value field typed from the record's schema (schemaless JSON: from the values), in the batch's transaction. See docs/schema-evolution.md."},
	{Name: KeyAutoEvolve, Type: config.Boolean, Default: "false", Group: "Schema", Doc: "Add a nullable column for a value field the table lacks (ALTER TABLE … ADD COLUMN, in the batch's transaction). Columns are never dropped or narrowed: a record whose schema a column cannot hold, or whose key is not the table's, stops the partition at that record. See docs/schema-evolution.md."},
}

// Spec returns the registry entry of the PostgreSQL sink.
func Spec() connectors.Spec {
	return connectors.Spec{
		Name:     "postgres",
		Class:    Class,
		Version:  "1.0",
		Defs:     Defs,
		Validate: validate,
		Identity: identity,
		New:      open,
	}
}

func writerConfig(c config.Connector, v config.Values) WriterConfig {
	return WriterConfig{
		Connector:       c.Name,
		Schema:          v[KeySchema],
		TableNameFormat: v[KeyTableFormat],
		InsertMode:      v[KeyInsertMode],
		PKMode:          v[KeyPKMode],
		PKFields:        v.List(KeyPKFields),
		DeleteEnabled:   v.Bool(KeyDeleteEnabled),
		ErrorsTolerance: c.ErrorsTolerance,
		DLQTable:        v[KeyDLQTable],
		DLQTopic:        v[config.KeyDLQTopic],
		AutoCreate:      v.Bool(KeyAutoCreate),
		AutoEvolve:      v.Bool(KeyAutoEvolve),
		CDCColumns:      v.List(convert.KeyCDCColumns),
	}
}

// validate returns every problem of the sink's settings at once.
func validate(v config.Values, p connectors.Policy) config.Errors {
	c := config.ParseConnector(v)
	var errs config.Errors
	for _, err := range writerConfig(c, v).problems() {
		errs = append(errs, config.FieldError{Name: fieldOf(err.Error()), Msg: err.Error()})
	}
	cs, err := ParseConnString(v[KeyURL], p)
	switch {
	case err != nil:
		errs = append(errs, config.FieldError{Name: KeyURL, Msg: err.Error()})
	case !cs.HasUser && v[KeyUser] == "" && !p.EnvCredentialsFor(cs.Endpoints):
		errs = append(errs, config.FieldError{Name: KeyUser, Msg: "no user in connection.url or connection.user; this worker does not lend its own (PGUSER, the OS user) to " + strings.Join(cs.Endpoints, ",") + " (worker setting connection.env.credentials.hosts)"})
	}
	return errs
}

// identity is what a stored password is bound to: the user, hosts and
// ports, and how the connection is protected (sslmode, sslnegotiation,
// channel_binding as pgx applies them). A change of any of them, a TLS
// downgrade as much as another host, drops the stored password unless the
// change sends it again.
func identity(v config.Values) (string, error) {
	cs, err := ParseConnString(v[KeyURL], connectors.Policy{UnixSockets: true})
	if err != nil {
		return "", err
	}
	return cs.Identity(v[KeyUser]) + " (" + cs.TLS() + ")", nil
}

// fieldOf extracts the setting name a WriterConfig.Validate message starts
// with ("insert.mode: …"), for the per-field validation report.
func fieldOf(msg string) string {
	if i := strings.Index(msg, ":"); i > 0 && !strings.Contains(msg[:i], " ") {
		return msg[:i]
	}
	return KeyInsertMode
}

func open(ctx context.Context, env connectors.Env, c config.Connector, v config.Values) (connectors.Sink, error) {
	cs, err := ParseConnString(v[KeyURL], env.Policy)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyURL, err)
	}
	// The pool's settings come from its own parse of the same, validated
	// string; the connection settings from ours.
	pc, err := pgxpool.ParseConfig(cs.URL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyURL, connStringErrorf("%s", parseErrorText(err)))
	}
	pc.ConnConfig = cs.ConnConfig(v[KeyUser], v[KeyPassword], env.Policy)
	pc.MaxConns = int32(v.Int(KeyPoolSize))
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "txsink/" + c.Name
	}
	pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(v.Int(KeyIdleTxTimeout), 10)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, markUnreachableAtOpen(fmt.Errorf("connect to PostgreSQL: %w", err))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, markUnreachableAtOpen(connectError(strings.Join(cs.Endpoints, ","), cs.User(v[KeyUser]), err))
	}
	wc := writerConfig(c, v)
	wc.Pipeline = env.Pipeline
	wc.Log = env.Log
	w, err := NewWriter(wc)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s, err := NewSink(ctx, pool, c.Name, w, v[KeySchema], v[KeyOffsetsTable], env.Log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.SetRoundParallelism(c.Parallelism)
	if (c.Delivery == config.ExactlyOnce || c.Delivery == config.ExactlyOnceSink) && c.RoundsInFlight > 1 {
		n := StagingSlots(int(pc.MaxConns), c.TasksMax, c.Parallelism)
		if n <= 0 {
			s.log.Warn("rounds are not pipelined: connection.pool.size leaves no connection to write the next round ahead",
				"connection.pool.size", pc.MaxConns, "tasks.max", c.TasksMax, "commit.parallelism", c.Parallelism)
		}
		s.EnableStaging(n)
	}
	return s, nil
}

// connectError is the error of a failed first connection. When the server
// answered with an error, its message leads, with the setting to fix: the
// driver's own text starts with whatever it tried first (under
// sslmode=prefer the TLS attempt the server refused) and puts the server's
// answer on a later line.
func connectError(at, user string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return fmt.Errorf("connect to PostgreSQL at %s as %s: %w", at, user, err)
	}
	fix := ""
	switch pe.Code {
	case "28P01":
		fix = " (check " + KeyPassword + ")"
	case "28000":
		fix = " (check " + KeyUser + " and the server's pg_hba.conf)"
	case "3D000":
		fix = " (check the database in " + KeyURL + ")"
	}
	return fmt.Errorf("connect to PostgreSQL at %s as %s: %s (SQLSTATE %s)%s: %w", at, user, pe.Message, pe.Code, fix, err)
}

// StagingSlots is how many transactions pipelined rounds may keep staged
// ahead (each holds a pooled connection): the pool less what every task's
// round may use at once (its prepares, then its commits, at most
// max(prepare.parallelism, 4) connections) and one for the queries around
// rounds (recovery, fencing). Staging never takes the connections a round
// needs, so a round never waits for the one staged behind it.
func StagingSlots(poolSize, tasks, parallelism int) int {
	return poolSize - max(tasks, 1)*max(parallelism, 4) - 1
}
