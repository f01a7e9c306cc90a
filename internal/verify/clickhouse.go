package verify

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	chsink "github.com/txsink/txsink/connectors/clickhouse"
)

// Intent states of the ClickHouse sink's txsink_intents. The status column
// holds attempt*4 + state (see the sink's state.go); readers take
// max(status) per batch and fence and decode the latest attempt's state as
// (max(status)+3)%4 + 1.
const (
	chIntentPending uint8 = 1
	chIntentDone    uint8 = 4
)

// IsClickHouseURL reports whether a sink URL names a ClickHouse server
// (clickhouse://host:port/db or tcp://host:port/db, the connector's
// connection.url forms).
func IsClickHouseURL(raw string) bool {
	s := strings.ToLower(strings.TrimSpace(raw))
	return strings.HasPrefix(s, "clickhouse://") || strings.HasPrefix(s, "tcp://")
}

// clickhouseOptions turns the sink URL (credentials in its user info or in
// SinkOptions.User/Password, database in its path) into driver options.
func clickhouseOptions(o SinkOptions) (*clickhouse.Options, string, error) {
	u, err := chsink.ParseURL(o.URL)
	if err != nil {
		return nil, "", fmt.Errorf("sink: %w", err)
	}
	db := strings.Trim(u.Path, "/")
	if db == "" {
		db = "default"
	}
	user, pw := "default", ""
	if u.User != nil {
		user = u.User.Username()
		pw, _ = u.User.Password()
	}
	if o.User != "" {
		user = o.User
	}
	if o.Password != "" {
		pw = o.Password
	}
	opts := &clickhouse.Options{
		Addr:        strings.Split(u.Host, ","),
		Protocol:    clickhouse.Native,
		Auth:        clickhouse.Auth{Database: db, Username: user, Password: pw},
		DialTimeout: 10 * time.Second,
		ReadTimeout: 5 * time.Minute,
		ClientInfo:  clickhouse.ClientInfo{Products: []struct{ Name, Version string }{{Name: "txsink-verify", Version: "1"}}},
	}
	if d := u.Query().Get("dial_timeout"); d != "" {
		opts.DialTimeout, _ = time.ParseDuration(d)
	}
	return opts, db, nil
}

// chIdent quotes a ClickHouse identifier.
func chIdent(s string) string {
	return "`" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "`", "\\`") + "`"
}

// chLiteral quotes a ClickHouse string literal.
func chLiteral(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

// readClickHouse reads a ClickHouse sink: stored offsets (the row with the
// greatest (fence, next_offset) per partition), unfinished intents, rows
// and dead letters. ClickHouse has no snapshot: the offsets are read first,
// then the intents, then the rows, so a batch committed during the read of
// a live deployment shows as beyond_offset (audit a stopped or drained
// connector for a strict result).
func readClickHouse(ctx context.Context, o SinkOptions, topics []string) ([]PartitionSink, []Prepared, error) {
	opts, db, err := clickhouseOptions(o)
	if err != nil {
		return nil, nil, err
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: connect: %w", err)
	}
	defer conn.Close()
	if err := conn.Ping(ctx); err != nil {
		return nil, nil, fmt.Errorf("sink: connect: %w", err)
	}
	qual := func(table string) string { return chIdent(db) + "." + chIdent(table) }

	parts := map[tp]*PartitionSink{}
	get := func(topic string, p int32) *PartitionSink {
		k := tp{topic, p}
		if parts[k] == nil {
			parts[k] = &PartitionSink{Topic: topic, Partition: p, Next: -1}
		}
		return parts[k]
	}
	want := map[string]bool{}
	var topicLits []string
	for _, t := range topics {
		want[t] = true
		topicLits = append(topicLits, chLiteral(t))
	}
	inTopics := "(" + strings.Join(topicLits, ", ") + ")"

	// Offsets.
	offs, err := chStoredOffsets(ctx, conn, db, o.OffsetsTable, o.Connector)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: read offsets: %w", err)
	}
	for _, so := range offs {
		if want[so.topic] {
			ps := get(so.topic, so.partition)
			ps.HasOffsets, ps.Fence, ps.Next = true, so.fence, so.next
		}
	}

	// Unfinished intents: batches whose every intent is pending.
	var prepared []Prepared
	if ok, err := chTableExists(ctx, conn, db, o.IntentsTable); err != nil {
		return nil, nil, fmt.Errorf("sink: read intents: %w", err)
	} else if ok {
		prepared, err = chUnfinishedIntents(ctx, conn, qual(o.IntentsTable), o.Connector, inTopics)
		if err != nil {
			return nil, nil, err
		}
	}

	// Rows, per distinct table.
	byTable := map[string][]string{}
	var tables []string
	for _, t := range topics {
		name := strings.ReplaceAll(o.Table, "${topic}", t)
		if byTable[name] == nil {
			tables = append(tables, name)
		}
		byTable[name] = append(byTable[name], t)
	}
	valueCols := []string{}
	if o.IDColumn != "" {
		valueCols = append(valueCols, o.IDColumn)
	}
	valueCols = append(valueCols, o.CompareColumns...)
	for _, c := range valueCols {
		if strings.Contains(c, "->") {
			return nil, nil, fmt.Errorf("sink: column %q: JSON fields (col->field) are not supported for ClickHouse; name a column", c)
		}
	}
	for _, table := range tables {
		ts := byTable[table]
		if o.TopicColumn == "-" && len(ts) > 1 {
			return nil, nil, fmt.Errorf("sink: table %s holds topics %v but has no topic column", table, ts)
		}
		topicExpr := chLiteral(ts[0])
		if o.TopicColumn != "-" {
			topicExpr = "toString(" + chIdent(o.TopicColumn) + ")"
		}
		cols := []string{topicExpr, "toInt32(" + chIdent(o.PartitionColumn) + ")", "toInt64(" + chIdent(o.OffsetColumn) + ")"}
		for _, c := range valueCols {
			cols = append(cols, "toString(assumeNotNull("+chIdent(c)+"))", "toUInt8(isNull("+chIdent(c)+"))")
		}
		q := "SELECT " + strings.Join(cols, ", ") + " FROM " + qual(table)
		if o.TopicColumn != "-" {
			q += " WHERE " + chIdent(o.TopicColumn) + " IN " + inTopics
		}
		rows, err := conn.Query(ctx, q)
		if err != nil {
			return nil, nil, fmt.Errorf("sink: read %s.%s: %w", db, table, err)
		}
		for rows.Next() {
			var topic string
			var p int32
			var off int64
			vals := make([]string, len(valueCols))
			nulls := make([]uint8, len(valueCols))
			dest := []any{&topic, &p, &off}
			for i := range valueCols {
				dest = append(dest, &vals[i], &nulls[i])
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return nil, nil, fmt.Errorf("sink: read %s.%s: %w", db, table, err)
			}
			r := Row{Offset: off}
			i := 0
			if o.IDColumn != "" {
				if nulls[0] == 0 {
					r.ID, r.HasID = vals[0], true
				}
				i = 1
			}
			r.Fields = make([]*string, len(o.CompareColumns))
			for j := range o.CompareColumns {
				if nulls[i+j] == 0 {
					v := vals[i+j]
					r.Fields[j] = &v
				}
			}
			ps := get(topic, p)
			ps.Rows = append(ps.Rows, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, nil, fmt.Errorf("sink: read %s.%s: %w", db, table, err)
		}
	}

	// Dead letters (the sink's dead-letter table has the coordinate
	// columns and a connector column).
	if o.DeadLetterTable != "" {
		name := o.DeadLetterTable
		if ok, err := chTableExists(ctx, conn, db, name); err != nil {
			return nil, nil, fmt.Errorf("sink: read dead letters: %w", err)
		} else if ok {
			rows, err := conn.Query(ctx, "SELECT "+chsink.ColTopic+", "+chsink.ColPartition+", "+chsink.ColOffset+" FROM "+qual(name)+
				" WHERE connector = "+chLiteral(o.Connector))
			if err != nil {
				return nil, nil, fmt.Errorf("sink: read dead letters: %w", err)
			}
			for rows.Next() {
				var topic string
				var p int32
				var off int64
				if err := rows.Scan(&topic, &p, &off); err != nil {
					rows.Close()
					return nil, nil, fmt.Errorf("sink: read dead letters: %w", err)
				}
				if want[topic] {
					ps := get(topic, p)
					ps.DeadLetters = append(ps.DeadLetters, off)
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, nil, fmt.Errorf("sink: read dead letters: %w", err)
			}
		}
	}

	out := make([]PartitionSink, 0, len(parts))
	for _, ps := range parts {
		out = append(out, *ps)
	}
	return out, prepared, nil
}

// chUnfinishedIntents lists the connector's batches (topic, partition,
// first, last) that have a pending intent and no done one: decided or
// not, nobody resolved them yet. Age is measured on the server's clock.
func chUnfinishedIntents(ctx context.Context, conn driver.Conn, table, connector, inTopics string) ([]Prepared, error) {
	q := fmt.Sprintf("SELECT topic, `partition`, first, last, max(fence), toInt64(now()) - toInt64(min(prepared_at)) FROM ("+
		"SELECT topic, `partition`, first, last, fence, toUInt8(modulo(toUInt16(max(status)) + 3, 4) + 1) AS st, min(prepared_at) AS prepared_at FROM %s "+
		"WHERE connector = %s AND topic IN %s GROUP BY topic, `partition`, first, last, fence) "+
		"GROUP BY topic, `partition`, first, last HAVING countIf(st = %d) > 0 AND countIf(st = %d) = 0 ORDER BY topic, `partition`, first",
		table, chLiteral(connector), inTopics, chIntentPending, chIntentDone)
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("sink: read intents: %w", err)
	}
	defer rows.Close()
	var out []Prepared
	for rows.Next() {
		var topic string
		var p int32
		var first, last int64
		var fence uint64
		var age int64
		if err := rows.Scan(&topic, &p, &first, &last, &fence, &age); err != nil {
			return nil, fmt.Errorf("sink: read intents: %w", err)
		}
		out = append(out, Prepared{
			GID:    fmt.Sprintf("intent %s[%d] %d..%d fence %d", topic, p, first, last, fence),
			Age:    time.Duration(max(age, 0)) * time.Second,
			Ours:   true,
			Intent: true,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sink: read intents: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Age > out[j].Age })
	return out, nil
}

// chStoredOffsets reads a connector's stored offsets from a ClickHouse
// offsets table: per partition the row with the greatest (fence,
// next_offset), as the connector reads them (none when the table does not
// exist).
func chStoredOffsets(ctx context.Context, conn driver.Conn, db, table, connector string) ([]storedOffset, error) {
	if ok, err := chTableExists(ctx, conn, db, table); err != nil || !ok {
		return nil, err
	}
	rows, err := conn.Query(ctx, "SELECT topic, `partition`, argMax(next_offset, (fence, next_offset)), max(fence) FROM "+
		chIdent(db)+"."+chIdent(table)+" WHERE connector = "+chLiteral(connector)+" GROUP BY topic, `partition`")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storedOffset
	for rows.Next() {
		var o storedOffset
		var fence uint64
		if err := rows.Scan(&o.topic, &o.partition, &o.next, &fence); err != nil {
			return nil, err
		}
		o.fence = int64(fence)
		out = append(out, o)
	}
	return out, rows.Err()
}

func chTableExists(ctx context.Context, conn driver.Conn, db, table string) (bool, error) {
	var n uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM system.tables WHERE database = "+chLiteral(db)+" AND name = "+chLiteral(table)).Scan(&n); err != nil {
		return false, err
	}
	return n > 0, nil
}
