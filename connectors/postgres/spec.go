package postgres

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
)

// Setting names of the PostgreSQL sink.
const (
	KeyURL           = "connection.url"
	KeyUser          = "connection.user"
	KeyPassword      = "connection.password"
	KeyPoolSize      = "connection.pool.size"
	KeySchema        = "table.schema"
	KeyTableFormat   = "table.name.format"
	KeyInsertMode    = "insert.mode"
	KeyPKMode        = "pk.mode"
	KeyPKFields      = "pk.fields"
	KeyDeleteEnabled = "delete.enabled"
	KeyDLQTable      = "errors.deadletterqueue.table.name"
	KeyOffsetsTable  = "offsets.table"
)

// Class is the connector.class alias of the PostgreSQL sink.
const Class = "io.txsink.postgres.PostgresSinkConnector"

// Defs are the PostgreSQL sink's settings.
var Defs = config.Defs{
	{Name: KeyURL, Type: config.String, Required: true, Group: "Connection", Doc: "PostgreSQL URL (postgres://host:port/db?sslmode=…) or JDBC URL (jdbc:postgresql://host:port/db). Allowed query parameters: " + strings.Join(allowedURLParams, ", ") + ".",
		Check: func(v string) error { _, err := ParseURL(v); return err }},
	{Name: KeyUser, Type: config.String, Group: "Connection", Doc: "User name; overrides the URL's."},
	{Name: KeyPassword, Type: config.Password, Group: "Connection", Doc: "Password; overrides the URL's. Never shown by the API or logs."},
	{Name: KeyPoolSize, Type: config.Int, Default: "8", Min: 2, Max: 256, Group: "Connection", Doc: "Maximum connections to the database."},
	{Name: KeySchema, Type: config.String, Default: "public", Group: "Mapping", Doc: "Schema of the target tables, the offsets table and the dead-letter table."},
	{Name: KeyTableFormat, Type: config.String, Default: "${topic}", Group: "Mapping", Doc: "Target table name; ${topic} is replaced by the record's topic. Always quoted."},
	{Name: KeyInsertMode, Type: config.String, Default: "insert", Enum: []string{"insert", "upsert"}, Group: "Mapping", Doc: "insert: COPY (a rewound range is written again); upsert: INSERT … ON CONFLICT (pk) DO UPDATE (a rewound range replaces rows)."},
	{Name: KeyPKMode, Type: config.String, Default: "none", Enum: []string{"none", "record_key", "record_value", "kafka"}, Group: "Mapping", Doc: "Where primary key values come from."},
	{Name: KeyPKFields, Type: config.List, Group: "Mapping", Doc: "Primary key columns (required for upsert with record_key or record_value)."},
	{Name: KeyDeleteEnabled, Type: config.Boolean, Default: "false", Group: "Mapping", Doc: "Tombstones (null values) delete the row with the record's key (needs pk.mode=record_key)."},
	{Name: KeyDLQTable, Type: config.String, Group: "Errors", Doc: "Dead-letter table (errors.tolerance=all), written in the same transaction as the rows; created if missing."},
	{Name: KeyOffsetsTable, Type: config.String, Default: "txsink_offsets", Group: "Offsets", Doc: "Table holding next_offset and fence per partition; created if missing."},
}

// allowedURLParams are the connection parameters a connector config may
// pass to the driver. File paths (sslkey, sslcert, sslrootcert, passfile,
// service files) are refused: a REST client must not make the worker read
// its own files.
var allowedURLParams = []string{"sslmode", "application_name", "connect_timeout", "target_session_attrs", "statement_timeout", "options", "user", "password", "sslnegotiation", "channel_binding"}

// ParseURL validates connection.url and returns it as a postgres:// URL.
func ParseURL(raw string) (*url.URL, error) {
	s := strings.TrimSpace(raw)
	if rest, ok := strings.CutPrefix(s, "jdbc:"); ok {
		s = rest
	}
	if strings.HasPrefix(s, "postgresql://") {
		s = "postgres://" + strings.TrimPrefix(s, "postgresql://")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", redactURLErr(err))
	}
	if u.Scheme != "postgres" || u.Host == "" {
		return nil, fmt.Errorf("must look like postgres://host:port/database or jdbc:postgresql://host:port/database")
	}
	for k := range u.Query() {
		ok := false
		for _, a := range allowedURLParams {
			if k == a {
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("connection parameter %q is not allowed (allowed: %s)", k, strings.Join(allowedURLParams, ", "))
		}
	}
	return u, nil
}

func redactURLErr(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// Spec returns the registry entry of the PostgreSQL sink.
func Spec() connectors.Spec {
	return connectors.Spec{
		Name:     "postgres",
		Class:    Class,
		Version:  "1.0",
		Defs:     Defs,
		Validate: validate,
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
	}
}

func validate(v config.Values) config.Errors {
	c := config.ParseConnector(v)
	if err := writerConfig(c, v).Validate(); err != nil {
		return config.Errors{{Name: fieldOf(err.Error()), Msg: err.Error()}}
	}
	return nil
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
	u, err := ParseURL(v[KeyURL])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyURL, err)
	}
	pc, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyURL, err)
	}
	if user := v[KeyUser]; user != "" {
		pc.ConnConfig.User = user
	}
	if pw := v[KeyPassword]; pw != "" {
		pc.ConnConfig.Password = pw
	}
	pc.MaxConns = int32(v.Int(KeyPoolSize))
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = "txsink/" + c.Name
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL at %s: %w", u.Redacted(), err)
	}
	wc := writerConfig(c, v)
	wc.Pipeline = env.Pipeline
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
	return s, nil
}
