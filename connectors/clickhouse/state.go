package clickhouse

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

var errNoRows = sql.ErrNoRows

// Intent states, in increasing precedence within one attempt. The
// intents table is a ReplacingMergeTree versioned by its status column,
// so merges keep the greatest status of each (batch, fence), and readers
// take max(status).
//
// A round the decision aborted is redone by the same owner under the same
// fence (no new Acquire), so one (batch, fence) can be prepared again
// after it was aborted. The stored status therefore carries the attempt
// as well as the state: status = attempt*4 + state (attempt 0 is 1..4, the
// values every row had before attempts existed, so old rows keep their
// meaning). A later attempt's rows outrank every row of an earlier one,
// for readers (max(status)) and for merges alike, without a change to the
// table. The engine's version column cannot be altered on an existing
// table, which is why the attempt is not a column of its own: a merge
// would keep an earlier attempt's abort over a later attempt's pending
// row.
const (
	statusPending uint8 = 1
	statusAborted uint8 = 2
	statusFenced  uint8 = 3 // a newer owner or an offsets reset took the partition before the commit
	statusDone    uint8 = 4
)

// maxAttempt is the greatest attempt a status of one byte holds
// (62*4 + 4 = 252).
const maxAttempt = 62

// statusCode is the stored status of state in attempt.
func statusCode(attempt int, state uint8) uint8 { return uint8(attempt*4) + state }

// decodeStatus splits a stored status into its attempt and state.
func decodeStatus(code uint8) (attempt int, state uint8) {
	if code == 0 {
		return 0, 0
	}
	return int(code-1) / 4, (code-1)%4 + 1
}

// sqlState is the SQL expression of the state of the stored status expr
// (see decodeStatus).
func sqlState(expr string) string { return "(modulo(toUInt16(" + expr + ") + 3, 4) + 1)" }

// offsetsDDL: one row per change; the current position of a partition is
// the row with the greatest (fence, next_offset). The engine's version is
// the fence, so merges keep the same row readers choose: within one fence
// next_offset only grows, and a stale owner's rows (lower fence) never win.
const offsetsDDL = `CREATE TABLE IF NOT EXISTS %s (
	connector String,
	topic String,
	` + "`partition`" + ` Int32,
	next_offset Int64,
	fence UInt64,
	updated_at DateTime
) ENGINE = ReplacingMergeTree(fence) ORDER BY (connector, topic, ` + "`partition`" + `)`

// intentsDDL: the durable intent log. A row per state change of a batch
// intent, keyed by batch identity and fence (two owners may prepare the
// same range: the de-dup token is the same for both); status holds the
// attempt and the state (see statusCode).
const intentsDDL = `CREATE TABLE IF NOT EXISTS %s (
	connector String,
	topic String,
	` + "`partition`" + ` Int32,
	first Int64,
	last Int64,
	fence UInt64,
	prev Int64,
	token String,
	target String,
	records UInt32,
	blocks UInt32,
	block_rows UInt32,
	mechanism String,
	status UInt8,
	prepared_at DateTime,
	updated_at DateTime,
	note String
) ENGINE = ReplacingMergeTree(status) ORDER BY (connector, topic, ` + "`partition`" + `, first, last, fence)`

// intent is one batch intent.
type intent struct {
	ID         twophase.BatchID
	Fence      int64
	Prev       int64
	Token      string
	Target     string
	Records    int
	Blocks     int
	BlockRows  int
	Mechanism  Mechanism
	Status     uint8 // the state (statusPending…statusDone) of the latest attempt
	Attempt    int   // the latest attempt (see statusCode)
	PreparedAt time.Time
}

// store holds the offsets and intents tables.
type store struct {
	conn    driver.Conn
	offsets string // quoted, qualified
	intents string
}

func (s *store) ensure(ctx context.Context) error {
	for _, ddl := range []string{fmt.Sprintf(offsetsDDL, s.offsets), fmt.Sprintf(intentsDDL, s.intents)} {
		if err := s.conn.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("clickhouse: create state table: %w", err)
		}
	}
	return nil
}

// positions reads the current positions of connector (topic "" = all).
func (s *store) positions(ctx context.Context, connector, topic string) (map[string]map[int32]offsets.Position, error) {
	q := "SELECT topic, `partition`, argMax(next_offset, (fence, next_offset)), max(fence), argMax(updated_at, (fence, next_offset)) FROM " + s.offsets + " WHERE connector = ?"
	args := []any{connector}
	if topic != "" {
		q += " AND topic = ?"
		args = append(args, topic)
	}
	q += " GROUP BY topic, `partition` ORDER BY topic, `partition`"
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read offsets: %w", err)
	}
	defer rows.Close()
	out := map[string]map[int32]offsets.Position{}
	for rows.Next() {
		var p offsets.Position
		var fence uint64
		if err := rows.Scan(&p.Topic, &p.Partition, &p.Next, &fence, &p.UpdatedAt); err != nil {
			return nil, fmt.Errorf("clickhouse: read offsets: %w", err)
		}
		p.Fence = int64(fence)
		if out[p.Topic] == nil {
			out[p.Topic] = map[int32]offsets.Position{}
		}
		out[p.Topic][p.Partition] = p
	}
	return out, rows.Err()
}

// lookup reads one partition's position; ok is false when it has none.
func (s *store) lookup(ctx context.Context, connector, topic string, partition int32) (offsets.Position, bool, error) {
	all, err := s.positions(ctx, connector, topic)
	if err != nil {
		return offsets.Position{}, false, err
	}
	p, ok := all[topic][partition]
	if !ok {
		p = offsets.Position{Topic: topic, Partition: partition, Next: offsets.Unset}
	}
	return p, ok, nil
}

// writePositions inserts position rows in one block.
func (s *store) writePositions(ctx context.Context, connector string, ps []offsets.Position) error {
	if len(ps) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.offsets+" (connector, topic, `partition`, next_offset, fence, updated_at)")
	if err != nil {
		return fmt.Errorf("clickhouse: write offsets: %w", err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	for _, p := range ps {
		if err := b.Append(connector, p.Topic, p.Partition, p.Next, uint64(p.Fence), now); err != nil {
			_ = b.Abort()
			return fmt.Errorf("clickhouse: write offsets: %w", err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("clickhouse: write offsets: %w", err)
	}
	return nil
}

// writeIntent inserts an intent row with the given state, in the intent's
// attempt.
func (s *store) writeIntent(ctx context.Context, in intent, status uint8, note string) error {
	return s.writeIntents(ctx, []intent{in}, status, note)
}

// writeIntents inserts a row with the given state for each intent, in its
// attempt, in one block: a round's intents go in together or not at all.
// Every row of one attempt carries the attempt's prepared_at.
func (s *store) writeIntents(ctx context.Context, ins []intent, status uint8, note string) error {
	if len(ins) == 0 {
		return nil
	}
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.intents+" (connector, topic, `partition`, first, last, fence, prev, token, target, records, blocks, block_rows, mechanism, status, prepared_at, updated_at, note)")
	if err != nil {
		return fmt.Errorf("clickhouse: write intent %s: %w", ins[0].ID, err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	for _, in := range ins {
		prepared := in.PreparedAt
		if prepared.IsZero() {
			prepared = now
		}
		if err := b.Append(in.ID.Connector, in.ID.Topic, in.ID.Partition, in.ID.First, in.ID.Last, uint64(in.Fence), in.Prev, in.Token, in.Target,
			uint32(in.Records), uint32(in.Blocks), uint32(in.BlockRows), string(in.Mechanism), statusCode(in.Attempt, status), prepared, now, note); err != nil {
			_ = b.Abort()
			return fmt.Errorf("clickhouse: write intent %s: %w", in.ID, err)
		}
	}
	if err := b.Send(); err != nil {
		return fmt.Errorf("clickhouse: write intent %s: %w", ins[0].ID, err)
	}
	return nil
}

// intentCols reads one (batch, fence) intent as its latest row: the
// greatest status, which is the latest attempt's latest state.
const intentCols = "topic, `partition`, first, last, fence, max(status), argMax(prev, status), argMax(token, status), argMax(target, status), " +
	"argMax(records, status), argMax(blocks, status), argMax(block_rows, status), argMax(mechanism, status), argMax(prepared_at, status)"

func scanIntents(rows driver.Rows, connector string) ([]intent, error) {
	defer rows.Close()
	var out []intent
	for rows.Next() {
		var in intent
		var fence uint64
		var records, blocks, blockRows uint32
		var mech string
		in.ID.Connector = connector
		if err := rows.Scan(&in.ID.Topic, &in.ID.Partition, &in.ID.First, &in.ID.Last, &fence, &in.Status, &in.Prev, &in.Token, &in.Target, &records, &blocks, &blockRows, &mech, &in.PreparedAt); err != nil {
			return nil, fmt.Errorf("clickhouse: read intents: %w", err)
		}
		in.Fence, in.Records, in.Blocks, in.BlockRows, in.Mechanism = int64(fence), int(records), int(blocks), int(blockRows), Mechanism(mech)
		in.Attempt, in.Status = decodeStatus(in.Status)
		out = append(out, in)
	}
	return out, rows.Err()
}

// intentsOf reads every (fence) intent of one batch identity.
func (s *store) intentsOf(ctx context.Context, id twophase.BatchID) ([]intent, error) {
	rows, err := s.conn.Query(ctx, "SELECT "+intentCols+" FROM "+s.intents+
		" WHERE connector = ? AND topic = ? AND `partition` = ? AND first = ? AND last = ? GROUP BY topic, `partition`, first, last, fence",
		id.Connector, id.Topic, id.Partition, id.First, id.Last)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read intents of %s: %w", id, err)
	}
	return scanIntents(rows, id.Connector)
}

// keyOf is the key of a batch identity within its connector.
func keyOf(id twophase.BatchID) batchKey {
	return batchKey{Topic: id.Topic, Partition: id.Partition, First: id.First, Last: id.Last}
}

// byBatch groups intents by batch.
func byBatch(ins []intent) map[batchKey][]intent {
	out := make(map[batchKey][]intent, len(ins))
	for _, in := range ins {
		k := keyOf(in.ID)
		out[k] = append(out[k], in)
	}
	return out
}

// intentsOfMany reads every (fence) intent of the batches ids of
// connector, by batch, in one query.
func (s *store) intentsOfMany(ctx context.Context, connector string, ids []twophase.BatchID) (map[batchKey][]intent, error) {
	if len(ids) == 1 {
		ins, err := s.intentsOf(ctx, ids[0])
		return byBatch(ins), err
	}
	topics, parts, firsts := map[string]bool{}, map[int32]bool{}, map[int64]bool{}
	for _, id := range ids {
		topics[id.Topic], parts[id.Partition], firsts[id.First] = true, true, true
	}
	var ts, ps, fs []string
	for t := range topics {
		ts = append(ts, sqlString(t))
	}
	for p := range parts {
		ps = append(ps, strconv.Itoa(int(p)))
	}
	for f := range firsts {
		fs = append(fs, strconv.FormatInt(f, 10))
	}
	rows, err := s.conn.Query(ctx, "SELECT "+intentCols+" FROM "+s.intents+" WHERE connector = ? AND topic IN ("+strings.Join(ts, ", ")+
		") AND `partition` IN ("+strings.Join(ps, ", ")+") AND first IN ("+strings.Join(fs, ", ")+") GROUP BY topic, `partition`, first, last, fence", connector)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read intents of %s and %d more: %w", ids[0], len(ids)-1, err)
	}
	ins, err := scanIntents(rows, connector)
	if err != nil {
		return nil, err
	}
	all := byBatch(ins)
	out := make(map[batchKey][]intent, len(ids))
	for _, id := range ids {
		out[keyOf(id)] = all[keyOf(id)]
	}
	return out, nil
}

// intentsOfToken reads the intents of connector written with token (the
// members of one round), by batch: each (batch, fence) as its latest row
// with that token.
func (s *store) intentsOfToken(ctx context.Context, connector, token string) (map[batchKey][]intent, error) {
	rows, err := s.conn.Query(ctx, "SELECT "+intentCols+" FROM "+s.intents+
		" WHERE connector = ? AND token = ? GROUP BY topic, `partition`, first, last, fence", connector, token)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read the intents of round %s: %w", token, err)
	}
	ins, err := scanIntents(rows, connector)
	return byBatch(ins), err
}

// sqlString is s as a ClickHouse string literal.
func sqlString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// pending lists the connector's intents whose batch is neither done nor
// resolved: for each batch identity with no done intent, its pending
// intents.
func (s *store) pending(ctx context.Context, connector string) ([]intent, error) {
	rows, err := s.conn.Query(ctx, "SELECT "+intentCols+" FROM "+s.intents+
		" WHERE connector = ? GROUP BY topic, `partition`, first, last, fence HAVING "+sqlState("max(status)")+" = ?", connector, statusPending)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: list pending intents: %w", err)
	}
	cands, err := scanIntents(rows, connector)
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	var out []intent
	for _, c := range cands {
		all, err := s.intentsOf(ctx, c.ID)
		if err != nil {
			return nil, err
		}
		done := false
		for _, a := range all {
			done = done || a.Status == statusDone
		}
		if !done {
			out = append(out, c)
		}
	}
	return out, nil
}

// blocksSince sums the blocks this connector inserted into target from
// rounds prepared at or after t (an estimate of how far a table's
// de-duplication window moved; other writers are not counted). A round's
// intents share its token and its block count.
func (s *store) blocksSince(ctx context.Context, connector, target string, t time.Time) (uint64, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT toUInt64(sum(blocks)) FROM (SELECT any(blocks) AS blocks FROM "+s.intents+
		" WHERE connector = ? AND target = ? AND "+sqlState("status")+" = ? AND prepared_at >= ? GROUP BY token)",
		connector, target, statusDone, t).Scan(&n)
	return n, err
}

// batchKey is a batch identity within a connector.
type batchKey struct {
	Topic       string
	Partition   int32
	First, Last int64
}

// oldestPending returns the prepared_at of the connector's oldest
// (batch, fence) intent whose latest attempt is still pending (its
// prepared_at is that attempt's); ok is false when
// there is none.
func (s *store) oldestPending(ctx context.Context, connector string) (time.Time, bool, error) {
	var n uint64
	var oldest time.Time
	err := s.conn.QueryRow(ctx, "SELECT count(), min(p) FROM (SELECT argMax(prepared_at, status) AS p FROM "+s.intents+
		" WHERE connector = ? GROUP BY topic, `partition`, first, last, fence HAVING "+sqlState("max(status)")+" = ?)", connector, statusPending).Scan(&n, &oldest)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("clickhouse: oldest pending intent: %w", err)
	}
	return oldest, n > 0, nil
}

// latestBatches returns the latest batch of each of the connector's
// partitions: the greatest prepared_at, then the greatest last offset.
func (s *store) latestBatches(ctx context.Context, connector string) ([]batchKey, error) {
	rows, err := s.conn.Query(ctx, "SELECT topic, `partition`, argMax(first, (prepared_at, last)), argMax(last, (prepared_at, last)) FROM "+s.intents+
		" WHERE connector = ? GROUP BY topic, `partition` ORDER BY topic, `partition`", connector)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: latest intents: %w", err)
	}
	defer rows.Close()
	var out []batchKey
	for rows.Next() {
		var k batchKey
		if err := rows.Scan(&k.Topic, &k.Partition, &k.First, &k.Last); err != nil {
			return nil, fmt.Errorf("clickhouse: latest intents: %w", err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
