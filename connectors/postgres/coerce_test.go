package postgres

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txsink/txsink/connectors/record"
)

func TestIsBadRecord(t *testing.T) {
	for code, bad := range map[string]bool{
		"22001": true, "22003": true, "22021": true, "22P02": true, "23502": true, "23505": true, "23514": true, "54000": true,
		"40001": false, "40P01": false, "08006": false, "57P01": false, "42P01": false, "42703": false, "42804": false, "53100": false,
	} {
		err := &pgconn.PgError{Code: code}
		if got := IsBadRecord(err); got != bad {
			t.Errorf("IsBadRecord(%s) = %v, want %v", code, got, bad)
		}
		if IsBadRecord(&dlqError{err: err}) {
			t.Errorf("a dead-letter write failure (%s) counts as a bad record", code)
		}
	}
	for code, retry := range map[string]bool{"40001": true, "40P01": true, "08006": true, "57P01": true, "53300": true, "23505": false, "42P01": false} {
		if got := IsRetryable(&pgconn.PgError{Code: code}); got != retry {
			t.Errorf("IsRetryable(%s) = %v, want %v", code, got, retry)
		}
	}
	re := &record.Error{Topic: "t", Partition: 3, Offset: 9, Field: "f", Err: errors.Join(record.ErrCoerce)}
	if !IsBadRecord(re) || IsRetryable(re) {
		t.Error("RecordError misclassified")
	}
	if got := re.Error(); got != `bad record t[3]@9 field "f": cannot convert value` {
		t.Errorf("Error() = %s", got)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  WriterConfig
		want string // message prefix, "" for valid
	}{
		{WriterConfig{Connector: "c"}, ""},
		{WriterConfig{}, "name:"},
		{WriterConfig{Connector: "c", InsertMode: "merge"}, "insert.mode:"},
		{WriterConfig{Connector: "c", PKMode: "x"}, "pk.mode:"},
		{WriterConfig{Connector: "c", InsertMode: "upsert"}, "pk.mode:"},
		{WriterConfig{Connector: "c", PKFields: []string{"a"}}, "pk.fields:"},
		{WriterConfig{Connector: "c", PKMode: "kafka", PKFields: []string{"a"}}, "pk.fields:"},
		{WriterConfig{Connector: "c", PKMode: "record_key", PKFields: []string{"a", "a"}}, "pk.fields:"},
		{WriterConfig{Connector: "c", PKMode: "record_value", DeleteEnabled: true}, "delete.enabled:"},
		{WriterConfig{Connector: "c", ErrorsTolerance: "all"}, "errors.deadletterqueue.table.name:"},
		{WriterConfig{Connector: "c", ErrorsTolerance: "some"}, "errors.tolerance:"},
		{WriterConfig{Connector: "c", ErrorsTolerance: "all", DLQTable: "ops.dlq"}, ""},
		{WriterConfig{Connector: "c", PKMode: "record_key", DeleteEnabled: true, InsertMode: "upsert"}, ""},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: unexpected %v", c.cfg, err)
		case c.want != "" && (err == nil || len(err.Error()) < len(c.want) || err.Error()[:len(c.want)] != c.want):
			t.Errorf("%+v: got %v, want an error starting with %q", c.cfg, err, c.want)
		}
	}
}
