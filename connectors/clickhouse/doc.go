// Package clickhouse is txsink's ClickHouse sink: exactly-once by
// at-least-once delivery plus de-duplication (mechanism 2 of the analysis),
// made safe by deterministic batches and a durable intent log kept in
// ClickHouse itself.
//
// A round (one batch per partition) goes through these steps (round.go),
// as one unit: one block per table per round, however many partitions it
// spans.
//
//  1. PrepareRound maps every record to a row (bad records are found here,
//     before the decision), checks each owner's fence, and inserts one
//     intent row per batch (connector, topic, partition, first, last,
//     prev, fence, the round's de-dup token, block layout), all in one
//     insert. No target row is written.
//  2. The runtime commits the Kafka transaction: the decision.
//  3. CommitRound inserts the round's rows in deterministic blocks (batches
//     in topic/partition order, rows of one table and column list
//     together), each carrying insert_deduplication_token where the server
//     supports it, otherwise as byte-identical blocks into a
//     Replicated*MergeTree table, which drops a block whose hash it has
//     seen; then it advances every stored offset and marks the intents
//     done. A commit in another process (recovery) finds the round's
//     intents by their token, re-reads exactly First..Last of every
//     partition from Kafka with read_committed and rebuilds the same
//     blocks.
//
// ClickHouse has no compare-and-set. Zombies are kept out by three layers:
// the Kafka decision (KIP-447: a fenced group generation cannot commit, so
// an old owner's batch never reaches step 3), the intent's fence compared
// with the stored fence at commit, and the de-duplication of identical
// blocks for the remaining race (two processes committing the same decided
// batch). What remains is the de-duplication window: when more blocks than
// the table's window reach it between an interrupted insert and its redo,
// the redo duplicates. Commit measures that risk on every redo, logs it and
// counts it (Metrics), and, where the table has the Kafka coordinate
// columns, skips blocks already present instead of relying on the window.
// docs/clickhouse.md states the guarantee.
package clickhouse
