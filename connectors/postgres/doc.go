// Package postgres is txsink's PostgreSQL sink: a two-phase-commit
// participant (participant.go) and the Writer that turns one partition's
// batch of Kafka records into rows inside the participant's transaction.
//
// The Writer maps JSON values (schemaless objects, or Kafka Connect's
// {"schema", "payload"} envelope) onto the columns of an existing table by
// name, converting each field to its column's type from the catalog
// (coerce.go lists the accepted inputs). Rows go in with COPY
// (insert.mode=insert) or INSERT … ON CONFLICT (insert.mode=upsert);
// tombstones become DELETEs when delete.enabled. Every identifier is quoted
// and no SQL text is built from record content.
//
// Bad records (undecodable, not convertible, or rejected by the database
// with a data or constraint error, see IsBadRecord) either stop the batch
// with a *record.Error at the lowest bad offset (errors.tolerance=none) or go
// to the dead-letter table in the same transaction (errors.tolerance=all),
// found by savepoints and bisection so the good records are still written in
// bulk. Any other error fails the whole batch; IsRetryable tells transient
// ones apart.
package postgres
