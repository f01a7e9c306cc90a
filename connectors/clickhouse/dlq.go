package clickhouse

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
)

// dlqColumns is the dead-letter table. Its coordinate columns make a redo's
// presence check work; every value is a function of the record, so a redo's
// block is byte-identical.
const dlqColumns = "connector String, " + ColTopic + " String, " + ColPartition + " Int32, " + ColOffset + " Int64, " +
	"key String, value String, headers String, error String, timestamp_ms Int64"

// dlqTable returns the dead-letter table, creating it when missing with a
// de-duplicating engine where exactly_once needs one.
func (s *Sink) dlqTable(ctx context.Context) (*table, error) {
	name := s.cfg.DLQTable
	s.mu.Lock()
	t := s.tables[name]
	s.mu.Unlock()
	if t != nil {
		return t, nil
	}
	t, err := loadTable(ctx, s.conn, s.feat, s.cfg.Database, name)
	if err != nil {
		engine, settings := s.autoEngine(name, true, false)
		ddl := "CREATE TABLE IF NOT EXISTS " + tableIdent(s.cfg.Database, name) + " (" + dlqColumns + ") ENGINE = " + engine +
			" ORDER BY (connector, " + ColTopic + ", " + ColPartition + ", " + ColOffset + ")"
		if settings != "" {
			ddl += " SETTINGS " + settings
		}
		if err := s.conn.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("clickhouse: create dead-letter table %s: %w", name, err)
		}
		if t, err = loadTable(ctx, s.conn, s.feat, s.cfg.Database, name); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.tables[name] = t
	s.mu.Unlock()
	return t, nil
}

// dlqBlock builds the dead-letter block of a batch's dead letters.
func (s *Sink) dlqBlock(ctx context.Context, letters []connectors.DeadLetter) (*block, error) {
	t, err := s.dlqTable(ctx)
	if err != nil {
		return nil, err
	}
	names := []string{"connector", ColTopic, ColPartition, ColOffset, "key", "value", "headers", "error", "timestamp_ms"}
	b := &block{}
	for _, n := range names {
		c := t.column(n)
		if c == nil {
			return nil, fmt.Errorf("clickhouse: dead-letter table %s has no column %s", t.Ident, n)
		}
		b.Cols = append(b.Cols, c)
	}
	for _, l := range letters {
		e, r := l.Err, l.Record
		row := []any{s.cfg.Connector, e.Topic, e.Partition, e.Offset, string(r.Key), string(r.Value), dlqHeaders(r.Headers), e.Error(), r.Timestamp.UnixMilli()}
		b.Rows = append(b.Rows, row)
		b.Offsets = append(b.Offsets, e.Offset)
	}
	return b, nil
}

// dlqHeaders is the headers column: record.HeadersJSON, "" without headers.
func dlqHeaders(hs []kgo.RecordHeader) string {
	h, _ := record.HeadersJSON(hs)
	return h
}
