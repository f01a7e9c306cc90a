// Package verify audits a sink against Kafka: it compares what a connector
// wrote to PostgreSQL or ClickHouse (rows carrying Kafka coordinates, the
// stored per-partition next_offset and fence, prepared transactions — for
// ClickHouse, unfinished intents — left behind)
// with the ground truth, a read_committed scan of the input topics, and
// optionally with the upstream producer's own log of acknowledged, failed
// and unknown transactions.
//
// Per partition it reports sink faults — loss (a committed record missing
// below the stored next_offset), duplicates (by coordinates and by payload
// id), aborted reads (rows whose coordinates are not committed records),
// value mismatches, rows beyond the stored offset, stored offsets past the
// log's stable end, offsets that went backwards (given a sampled history),
// leftover prepared transactions or intents — and the final lag. Anomalies of the
// upstream itself (the broker lost an acknowledged record, an aborted
// transaction became visible) are reported apart: they are not the sink's
// fault.
//
// The sink is read first, in one REPEATABLE READ snapshot, and Kafka after
// it, so a check of a live deployment is consistent: every row the sink
// holds refers to a record that was committed before the scan's stable end.
// ClickHouse has no snapshot: its offsets are read before its rows, so a
// batch committed during the read of a live sink shows as beyond_offset.
//
// Check runs the whole audit; Analyze is the pure comparison it ends with,
// for callers that collect the two sides themselves.
package verify
