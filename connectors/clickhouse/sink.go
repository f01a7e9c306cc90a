package clickhouse

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/offsets"
	"github.com/txsink/txsink/twophase"
)

// Compile-time checks.
var (
	_ connectors.Sink          = (*Sink)(nil)
	_ connectors.LocalWriter   = (*Sink)(nil)
	_ connectors.KeyReader     = (*Sink)(nil)
	_ twophase.Participant     = (*Sink)(nil)
	_ twophase.Stager          = (*Sink)(nil)
	_ connectors.RecordLocator = (*record.Error)(nil)
)

// Failpoints inside Commit (internal/failpoint). W1, after the intent and
// the decision but before any insert, is the runtime's after-decide point.
const (
	// PointMidInsert is hit between two blocks of a batch (W2).
	PointMidInsert = "ch-mid-insert"
	// PointAfterInsert is hit after every block of a batch went in and
	// before the offset advance and the intent's done mark (W3).
	PointAfterInsert = "ch-after-insert"
)

// Token returns a batch's de-duplication token: a hash of its identity
// (connector, topic, partition, first, last). It does not include the
// fence: two owners that prepared the same range insert the same rows, and
// the second must be recognised as the first. Block i of the batch is
// inserted with Token(id) + "-" + i, its dead letters with "-dlq".
func Token(id twophase.BatchID) string {
	h := sha256.New()
	for _, s := range []string{id.Connector, id.Topic, strconv.Itoa(int(id.Partition)), strconv.FormatInt(id.First, 10), strconv.FormatInt(id.Last, 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "txsink1-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Status is what the sink reports about itself (for the status API,
// metrics and tests).
type Status struct {
	Features Features
	// Mechanisms maps each target table to how its inserts are
	// de-duplicated.
	Mechanisms map[string]Mechanism
	// Redos counts commits that rebuilt their batch from Kafka (recovery,
	// another process); RedoBlocksSkipped counts blocks a redo found
	// already present; DedupWindowRisk counts redos that ran after the
	// table's de-duplication window may have turned over and could not
	// check presence (duplicates possible); Fenced counts commits refused
	// because the stored fence moved; IntentsDeleted counts intents the
	// retention cleanup deleted.
	Redos, RedoBlocksSkipped, DedupWindowRisk, Fenced, Committed, IntentsDeleted uint64
}

// Sink is the ClickHouse sink.
type Sink struct {
	cfg Config
	env connectors.Env
	// records converts the batches the runtime did not convert: the
	// ranges recovery re-reads (the runtime's pipeline, built from
	// env.Pipeline and errors.tolerance).
	records *connectors.RecordPipeline
	conn    driver.Conn
	st      *store
	feat    Features
	log     *slog.Logger
	stats   struct {
		redos, skipped, risk, fenced, committed, cleaned atomic.Uint64
	}
	stopCleanup func()        // stops the intents cleanup; nil when none runs
	unsafeSeq   atomic.Uint64 // the negative control's distinct tokens

	mu     sync.Mutex
	tables map[string]*table
	mechs  map[string]Mechanism
	cache  map[cacheKey]*prepared
	// ahead holds the batches mapped ahead of their round (Stage) until
	// their Prepare or Discard.
	ahead map[twophase.BatchID]*prepared
}

type cacheKey struct {
	id    twophase.BatchID
	fence int64
}

// prepared is a batch's rows, kept in memory from Prepare to Commit.
type prepared struct {
	groups []*rowGroup // the rows, by table and column list
	blocks []*block    // the groups cut into blocks
	dlq    *block      // nil without a dead-letter table or dead letters
	// members are the intents of the round, once it is prepared (nil for
	// a batch staged or rebuilt alone).
	members []intent
}

// Open connects to ClickHouse, detects the server's features and creates
// the state tables when missing.
func Open(ctx context.Context, env connectors.Env, cfg Config) (*Sink, error) {
	log := env.Log
	if log == nil {
		log = slog.Default()
	}
	conn, err := clickhouse.Open(cfg.options())
	if err != nil {
		return nil, fmt.Errorf("connect to ClickHouse: %w", err)
	}
	if err := conn.Ping(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect to ClickHouse at %s: %w", strings.Join(cfg.Addr, ","), err)
	}
	feat, err := detectFeatures(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	s := &Sink{
		cfg:     cfg,
		env:     env,
		records: connectors.NewRecordPipeline(env.Pipeline, cfg.ErrorsTolerance, cfg.DeleteEnabled),
		conn:    conn,
		feat:    feat,
		log:     log,
		st:      &store{conn: conn, offsets: tableIdent(cfg.Database, cfg.OffsetsTable), intents: tableIdent(cfg.Database, cfg.IntentsTable)},
		tables:  map[string]*table{},
		mechs:   map[string]Mechanism{},
		cache:   map[cacheKey]*prepared{},
	}
	if err := s.st.ensure(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	s.startCleanup()
	return s, nil
}

// Features returns what the server offers.
func (s *Sink) Features() Features { return s.feat }

// Status returns the sink's counters and mechanisms.
func (s *Sink) Status() Status {
	s.mu.Lock()
	m := make(map[string]Mechanism, len(s.mechs))
	for k, v := range s.mechs {
		m[k] = v
	}
	s.mu.Unlock()
	return Status{Features: s.feat, Mechanisms: m, Redos: s.stats.redos.Load(), RedoBlocksSkipped: s.stats.skipped.Load(),
		DedupWindowRisk: s.stats.risk.Load(), Fenced: s.stats.fenced.Load(), Committed: s.stats.committed.Load(), IntentsDeleted: s.stats.cleaned.Load()}
}

// Collectors returns Prometheus collectors of the sink's counters, labelled
// with the connector; the worker registers them.
func (s *Sink) Collectors() []prometheus.Collector {
	lbl := prometheus.Labels{"connector": s.cfg.Connector}
	c := func(name, help string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "txsink", Subsystem: "clickhouse", Name: name, Help: help, ConstLabels: lbl},
			func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		c("redos_total", "Commits that rebuilt their batch from Kafka (recovery or another process).", &s.stats.redos),
		c("redo_blocks_skipped_total", "Blocks a redo found already present (coordinate columns) and did not insert again.", &s.stats.skipped),
		c("dedup_window_risk_total", "Redos that ran after the table's de-duplication window may have turned over, without a presence check: duplicates possible.", &s.stats.risk),
		c("fenced_commits_total", "Commits refused because the stored fence moved (a newer owner or an offsets reset).", &s.stats.fenced),
		c("committed_batches_total", "Batches whose rows were inserted and whose intents were marked done.", &s.stats.committed),
		c("intents_deleted_total", "Resolved intents the retention cleanup (intents.retention.ms) deleted.", &s.stats.cleaned),
	}
}

func (s *Sink) mapping() mapping {
	m := mapping{VersionColumn: s.cfg.VersionColumn, DeletedColumn: s.cfg.DeletedColumn, DeleteEnabled: s.cfg.DeleteEnabled,
		KeyFields: s.cfg.PKFields, Format: s.cfg.TableNameFormat, AutoEvolve: s.cfg.AutoEvolve, Modern: s.modern()}
	if s.cfg.AutoCreate {
		m.Create = s.createSQL
	}
	return m
}

// snapshot returns an empty snapshot that takes tables from the sink's
// cache.
func (s *Sink) snapshot() *snapshot {
	return &snapshot{tables: map[string]*snapTable{}, from: func(name string) (*table, bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.tables[name], false
	}}
}

// load reads table name from the server into snap and the cache. A
// table that does not exist is an error wrapping ErrTableNotFound,
// unless auto.create is on: then snap knows it does not exist.
func (s *Sink) load(ctx context.Context, snap *snapshot, name string) error {
	t, err := loadTable(ctx, s.conn, s.feat, s.cfg.Database, name)
	if errors.Is(err, ErrTableNotFound) && s.cfg.AutoCreate {
		s.forget(name)
		snap.set(name, nil)
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.tables[name] = t
	s.mu.Unlock()
	snap.set(name, t)
	return nil
}

// resolve does what an incomplete plan asks before the batch is planned
// again: reads the tables it lacks; or runs auto.create's and
// auto.evolve's DDL and reads the changed tables again. A table is read
// at most once and altered at most once per build, so a build plans a
// few times at most.
func (s *Sink) resolve(ctx context.Context, snap *snapshot, p *rowPlan) error {
	if len(p.reads) > 0 {
		for _, name := range p.reads {
			if err := s.load(ctx, snap, name); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range p.creates {
		if err := s.conn.Exec(ctx, c.ddl); err != nil {
			return fmt.Errorf("clickhouse: auto.create %s: %w: %w", c.name, ErrSchemaChangeFailed, err)
		}
		s.log.Info("created table (auto.create)", "table", c.name, "ddl", c.ddl)
		if err := s.load(ctx, snap, c.name); err != nil {
			return err
		}
		snap.tables[c.name].created = true
	}
	for _, e := range p.evolves {
		for _, c := range e.cols {
			if err := s.addColumn(ctx, e.t, c[0], c[1]); err != nil {
				return err
			}
		}
		s.forget(e.t.Name)
		if err := s.load(ctx, snap, e.t.Name); err != nil {
			return err
		}
		snap.tables[e.t.Name].evolved = true
	}
	return nil
}

// createSQL is auto.create's DDL for the table of rec: a change event's
// table is a ReplacingMergeTree(version, is_deleted) ordered by its key
// (ReplacingMergeTree(version) with an is_deleted column before 23.2).
func (s *Sink) createSQL(name string, rec *record.Record) (string, error) {
	if rec.Value.Kind() != record.KindStruct {
		return "", record.Errorf(record.ErrDecode, "auto.create: value must be a struct (a JSON object), got %s", rec.Value.Describe())
	}
	cdc := rec.Change != nil
	orderBy := s.cfg.PKFields
	coords := s.cfg.PKMode == "kafka"
	if coords {
		orderBy = []string{ColTopic, ColPartition, ColOffset}
	}
	if cdc {
		if s.cfg.VersionColumn == "" {
			return "", record.Errorf(record.ErrIncompatible, "auto.create of a table for change events needs version.column (the ReplacingMergeTree version, filled with the source position): set it")
		}
		if rec.Key.Kind() == record.KindStruct {
			orderBy = nil
			_ = rec.Key.Range(func(n []byte, _ record.Value) error { orderBy = append(orderBy, string(n)); return nil })
		}
	}
	engine, settings := s.autoEngine(name, false, cdc)
	return createTableSQL(tableIdent(s.cfg.Database, name), rec, s.modern(), s.mapping(), createOpts{
		coords: coords, orderBy: orderBy, engine: engine, settings: settings, deleted: cdc || s.cfg.DeleteEnabled, changeCols: s.cfg.CDCColumns,
	})
}

// addColumn runs ALTER TABLE … ADD COLUMN IF NOT EXISTS. Servers before
// 19.x do not know IF NOT EXISTS (a syntax error): there it checks
// system.columns, adds the column, and takes a failure as success when
// the column exists after all (another writer added it meanwhile), so the
// change stays idempotent.
func (s *Sink) addColumn(ctx context.Context, t *table, name, typ string) error {
	ddl := "ALTER TABLE " + t.Ident + " ADD COLUMN IF NOT EXISTS " + quoteIdent(name) + " " + typ
	err := s.conn.Exec(ctx, ddl)
	if err != nil {
		exists := func() bool { ok, err := s.hasColumn(ctx, t, name); return err == nil && ok }
		if !exists() {
			ddl = "ALTER TABLE " + t.Ident + " ADD COLUMN " + quoteIdent(name) + " " + typ
			if err = s.conn.Exec(ctx, ddl); err != nil && exists() {
				err = nil
			}
		} else {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("clickhouse: auto.evolve %s: %w: %w", t.Ident, ErrSchemaChangeFailed, err)
	}
	// An ALTER of a Replicated table goes through ZooKeeper: on 18.16 it
	// can return before this replica's system.columns shows the column,
	// and a batch planned again at once would take the field for one
	// without a column (a bad record). Wait until the column is there.
	if err := waitColumn(ctx, name, columnVisibleWait, func() (bool, error) { return s.hasColumn(ctx, t, name) }); err != nil {
		return fmt.Errorf("clickhouse: auto.evolve %s: %w: %w", t.Ident, ErrSchemaChangeFailed, err)
	}
	s.log.Info("added a column (auto.evolve)", "table", t.Name, "ddl", ddl)
	return nil
}

// hasColumn reports whether system.columns shows column name of t.
func (s *Sink) hasColumn(ctx context.Context, t *table, name string) (bool, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?", t.DB, t.Name, name).Scan(&n)
	return n > 0, err
}

// columnVisibleWait bounds how long auto.evolve waits for an added column
// to show in system.columns: the ALTER's own replication_alter_columns_timeout
// default.
const columnVisibleWait = 60 * time.Second

// waitColumn asks visible, backing off from 10 ms to 500 ms, until it
// reports the column there, the bound passes or ctx ends.
func waitColumn(ctx context.Context, name string, bound time.Duration, visible func() (bool, error)) error {
	deadline := time.Now().Add(bound)
	delay := 10 * time.Millisecond
	for {
		ok, err := visible()
		if err == nil && ok {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("not in system.columns")
			}
			return fmt.Errorf("column %q added but not visible after %s: %w", name, bound, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// modern reports whether the server has Bool, Date32, DateTime64 and Map
// (21.12 and later), which auto.create then uses.
func (s *Sink) modern() bool { return s.feat.Version.AtLeast(21, 12) }

// forget drops a cached table description (the table may have changed).
func (s *Sink) forget(name string) {
	s.mu.Lock()
	delete(s.tables, name)
	s.mu.Unlock()
}

// autoEngine returns the ENGINE and SETTINGS of a table txsink creates
// (auto.create, the dead-letter table): one that de-duplicates when
// exactly_once needs it; for change events (cdc) a ReplacingMergeTree of
// the version and, where the server has it, the deletion flag.
func (s *Sink) autoEngine(name string, dlq, cdc bool) (engine, settings string) {
	if s.cfg.AutoEngine != "" && !dlq {
		return s.cfg.AutoEngine, ""
	}
	base, args := "MergeTree", ""
	if s.cfg.VersionColumn != "" && !dlq {
		base = "ReplacingMergeTree"
		args = quoteIdent(s.cfg.VersionColumn)
		if (s.cfg.DeleteEnabled || cdc) && s.feat.IsDeleted {
			args += ", " + quoteIdent(s.cfg.DeletedColumn)
		}
	}
	if s.cfg.Delivery != config.ExactlyOnce {
		return base + "(" + args + ")", ""
	}
	if s.feat.DedupToken && s.cfg.Dedup != "blocks" {
		return base + "(" + args + ")", "non_replicated_deduplication_window = 1000"
	}
	if s.canReplicate() {
		path := "'/clickhouse/tables/{shard}/" + strings.ReplaceAll(s.cfg.Database+"/"+name, "'", "") + "', '{replica}'"
		if args != "" {
			path += ", " + args
		}
		return "Replicated" + base + "(" + path + ")", ""
	}
	return base + "(" + args + ")", ""
}

func (s *Sink) canReplicate() bool {
	return s.feat.ZooKeeper && s.feat.Macros["shard"] != "" && s.feat.Macros["replica"] != ""
}

// mechanismFor chooses the de-duplication of inserts into t, honouring
// insert.deduplication.
func (s *Sink) mechanismFor(t *table) (Mechanism, string) {
	m, why := s.feat.mechanism(t.Engine)
	switch s.cfg.Dedup {
	case "token":
		if m != MechToken {
			if why == "" {
				why = "insert.deduplication=token but " + string(m) + " would be used"
			}
			return MechNone, why + " (insert.deduplication=token)"
		}
	case "blocks":
		if t.Engine.Replicated && s.feat.InsertDeduplicate && t.Engine.Window > 0 {
			return MechBlocks, ""
		}
		if why == "" {
			why = fmt.Sprintf("insert.deduplication=blocks needs a Replicated*MergeTree table, and %s is %s", t.Ident, t.Engine.Name)
		}
		return MechNone, why
	}
	return m, why
}

// insertCtx returns ctx with the settings of an insert under mechanism m:
// de-duplication switched on by every setting the server has for it
// (insert_deduplicate; deduplicate_insert, which supersedes it on 26.x),
// and the block's token under MechToken.
//
// The negative control (UnsafeNoFencing, test only) switches all of it off
// and, where the server has tokens, sends a token no other insert carries,
// so that neither the token nor the block's content can make the server
// drop a zombie's repeated insert.
func (s *Sink) insertCtx(ctx context.Context, m Mechanism, token string) context.Context {
	set := clickhouse.Settings{}
	unsafe := s.cfg.UnsafeNoFencing
	if s.feat.InsertDeduplicate {
		set["insert_deduplicate"] = 1
		if unsafe {
			set["insert_deduplicate"] = 0
		}
	}
	if s.feat.DeduplicateInsert {
		set["deduplicate_insert"] = "enable"
		if unsafe {
			set["deduplicate_insert"] = "disable"
		}
	}
	switch {
	case unsafe && s.feat.DedupToken:
		set["insert_deduplication_token"] = token + "-unsafe-" + strconv.FormatUint(s.unsafeSeq.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	case m == MechToken && !unsafe:
		set["insert_deduplication_token"] = token
	}
	return clickhouse.Context(ctx, clickhouse.WithSettings(set))
}

// insert sends one block.
func (s *Sink) insert(ctx context.Context, ident string, b *block) error {
	batch, err := s.conn.PrepareBatch(ctx, insertSQL(ident, b.Cols))
	if err != nil {
		return fmt.Errorf("clickhouse: insert into %s: %w", ident, err)
	}
	for i, row := range b.Rows {
		if err := batch.Append(row...); err != nil {
			_ = batch.Abort()
			return fmt.Errorf("clickhouse: insert into %s: offset %d: %w", ident, b.Offsets[i], err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("clickhouse: insert into %s: %w", ident, err)
	}
	return nil
}

// buildBatch builds the blocks of a batch from its converted records (the
// runtime's, or converted now for a batch the runtime did not convert).
func (s *Sink) buildBatch(ctx context.Context, b *twophase.Batch) (*prepared, error) {
	c, err := s.records.Batch(ctx, b)
	if err != nil {
		return nil, err
	}
	return s.build(ctx, c, s.cfg.BlockRows)
}

// build maps a batch's records to blocks of their tables (and a
// dead-letter block). With errors.tolerance=none a bad record is returned
// as a *record.Error (the lowest offset).
//
// The rows are planned against a snapshot of the cached tables; the tables
// the plan lacks are read, and the tables it must create or alter are
// changed (auto.create, auto.evolve: before the batch's intent, idempotent
// on a redo) and read again, each followed by a pass against the new
// snapshot.
func (s *Sink) build(ctx context.Context, c *connectors.Converted, blockRows int) (*prepared, error) {
	m, snap := s.mapping(), s.snapshot()
	var rp *rowPlan
	for {
		var err error
		if rp, err = mapRecords(ctx, m, snap, c); err != nil {
			return nil, err
		}
		if rp.complete() {
			break
		}
		if err := s.resolve(ctx, snap, rp); err != nil {
			return nil, err
		}
	}
	p := &prepared{groups: rp.groups, blocks: blocks(rp.groups, blockRows)}
	// The records the mapping refused go to the runtime's tolerance
	// operator: with errors.tolerance=none the lowest fails the batch.
	if err := c.Reject(rp.bad); err != nil {
		return nil, err
	}
	letters := c.DeadLetters()
	if len(letters) == 0 || s.cfg.DLQTable == "" {
		return p, nil // dead letters go to the runtime's topic only
	}
	var err error
	p.dlq, err = s.dlqBlock(ctx, letters)
	return p, err
}

// nextAttempt sets the attempt of in, a batch about to be prepared under
// its fence, from the batch's earlier intents old: a new attempt after an
// aborted one (a round the decision aborted, redone by the same owner
// under the same fence), else the current one (attempt 0 for a first
// Prepare; the same attempt, with its prepared_at, for a Prepare repeated
// before any decision). A later attempt's rows outrank the earlier
// attempt's abort (see statusCode). Nothing was inserted for an aborted
// attempt (rows go in only after a committed decision), so the redo's
// inserts may reuse the batch's token.
func nextAttempt(in *intent, old []intent) error {
	for _, o := range old {
		if o.Fence != in.Fence {
			continue
		}
		switch o.Status {
		case statusPending:
			in.Attempt, in.PreparedAt = o.Attempt, o.PreparedAt
		case statusAborted:
			if o.Attempt >= maxAttempt {
				// The stored status has no room for another attempt under
				// this fence: a restart of the task acquires a new fence,
				// under which attempts count from 0 again.
				return fmt.Errorf("clickhouse: prepare %s: %d aborted attempts under fence %d, no room for another; the partition is acquired anew: %w",
					in.ID, o.Attempt+1, in.Fence, twophase.ErrFenced)
			}
			in.Attempt = o.Attempt + 1
		default:
			// Done or fenced under this fence: the offset checks refuse
			// such a batch before it gets here.
			in.Attempt = o.Attempt
		}
	}
	return nil
}

// Stage implements twophase.Stager: it maps the batch's records into
// blocks (converters, transforms, column mapping, dead letters) while the
// previous round records its intents, decides and inserts. Nothing is
// written: the intent and the inserts stay Prepare's and Commit's. The
// blocks are kept in memory until Prepare(b) or Discard. An error (a bad
// record with errors.tolerance=none, an unavailable registry) keeps
// nothing: Prepare maps the batch again and reports it.
func (s *Sink) Stage(ctx context.Context, b *twophase.Batch) error {
	if len(b.Records) == 0 {
		return fmt.Errorf("clickhouse: stage %s: empty batch", b.ID)
	}
	p, err := s.buildBatch(ctx, b)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ahead == nil {
		s.ahead = map[twophase.BatchID]*prepared{}
	}
	s.ahead[b.ID] = p
	return nil
}

// Discard implements twophase.Stager.
func (s *Sink) Discard(ids []twophase.BatchID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.ahead, id)
	}
}

func (s *Sink) takeAhead(id twophase.BatchID) *prepared {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.ahead[id]
	delete(s.ahead, id)
	return p
}

// nothingPrepared marks a failure of the record pipeline's environment
// (an unavailable schema registry) or of a schema change, met before the
// intent is written, as leaving nothing prepared.
func nothingPrepared(err error) error {
	if errors.Is(err, record.ErrUnavailable) || errors.Is(err, ErrSchemaChangeFailed) {
		return fmt.Errorf("%w: %w", twophase.ErrNothingPrepared, err)
	}
	return err
}

// tables lists the tables of the batch's blocks, in block order.
func (p *prepared) tables() []*table {
	var out []*table
	for _, b := range p.blocks {
		if !slices.Contains(out, b.T) {
			out = append(out, b.T)
		}
	}
	return out
}

// target names the batch's tables for its intent: one name, or several
// separated by newlines (names never contain one).
func (p *prepared) target() string {
	var names []string
	for _, t := range p.tables() {
		names = append(names, t.Name)
	}
	return strings.Join(names, "\n")
}

// mechanism is how a block into t of the batch of intent in is
// de-duplicated: as recorded in the intent for its one table, else as the
// table's engine says.
func (s *Sink) mechanism(in intent, t *table) Mechanism {
	if in.Mechanism != "" && in.Target == t.Name {
		return in.Mechanism
	}
	m, _ := s.mechanismFor(t)
	return m
}

func (p *prepared) nblocks() int {
	n := len(p.blocks)
	if p.dlq != nil {
		n++
	}
	return n
}

func (s *Sink) takeCache(id twophase.BatchID, fence int64) *prepared {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache[cacheKey{id, fence}]
}

func (s *Sink) dropCache(id twophase.BatchID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.cache {
		if k.id == id {
			delete(s.cache, k)
		}
	}
}

// insertAll inserts a round's blocks and dead letters (in is one of its
// intents: the token, the mechanism and the names in logs are the
// round's). On a redo it first measures the de-duplication window risk
// and, for the tables with the coordinate columns, skips blocks already
// present.
func (s *Sink) insertAll(ctx context.Context, in intent, p *prepared, redo bool) error {
	checks := redo && s.cfg.RedoSkipPresent && !s.cfg.UnsafeNoFencing
	check := func(t *table) bool { return checks && t.hasCoordinates() }
	all := map[*table]map[partKey][]int64{} // the round's offsets in each table, by partition
	for _, b := range append(slices.Clone(p.blocks), p.dlq) {
		if b == nil || !checks {
			continue
		}
		if all[b.T] == nil {
			all[b.T] = map[partKey][]int64{}
		}
		for _, r := range b.runs(in.ID) {
			all[b.T][r.key] = append(all[b.T][r.key], r.offs...)
		}
	}
	if redo {
		s.stats.redos.Add(1)
		for _, t := range p.tables() {
			s.redoRisk(ctx, in, t, check(t))
		}
	}
	skipped := 0
	if checks {
		defer func() {
			s.log.Info("redo presence check: blocks already present were not inserted again", "batch", in.ID.String(), "present", skipped, "blocks", len(p.blocks))
		}()
	}
	for i, b := range p.blocks {
		if i > 0 {
			failpoint.HitIn(in.ID.Connector, PointMidInsert)
		}
		if check(b.T) {
			present, err := s.present(ctx, b.T, in.ID, b, all[b.T])
			if err != nil {
				return err
			}
			if present {
				s.stats.skipped.Add(1)
				skipped++
				continue
			}
		}
		if err := s.insert(s.insertCtx(ctx, s.mechanism(in, b.T), in.Token+"-"+strconv.Itoa(i)), b.T.Ident, b); err != nil {
			return err
		}
	}
	if p.dlq != nil {
		if len(p.blocks) > 0 {
			failpoint.HitIn(in.ID.Connector, PointMidInsert)
		}
		dt, err := s.dlqTable(ctx)
		if err != nil {
			return err
		}
		dmech, _ := s.mechanismFor(dt)
		if checks {
			present, err := s.present(ctx, dt, in.ID, p.dlq, all[p.dlq.T])
			if err != nil {
				return err
			}
			if present {
				s.stats.skipped.Add(1)
				return nil
			}
		}
		if err := s.insert(s.insertCtx(ctx, dmech, in.Token+"-dlq"), dt.Ident, p.dlq); err != nil {
			return err
		}
	}
	return nil
}

// partKey is a topic partition.
type partKey struct {
	topic     string
	partition int32
}

// run is the rows of one partition within a block.
type run struct {
	key  partKey
	offs []int64
}

// runs splits b's rows by partition: by its spans, or, for a block of a
// round of one (no spans), as the rows of the batch id.
func (b *block) runs(id twophase.BatchID) []run {
	if len(b.Spans) == 0 {
		return []run{{partKey{id.Topic, id.Partition}, b.Offsets}}
	}
	out := make([]run, 0, len(b.Spans))
	at := 0
	for _, sp := range b.Spans {
		out = append(out, run{partKey{sp.topic, sp.partition}, b.Offsets[at : at+sp.n]})
		at += sp.n
	}
	return out
}

// present reports whether every row of b is already in t, by counting, for
// each partition of b, the rows with its coordinates. all lists every
// offset of the round in t by partition, so that rows of other blocks
// inside a partition's offset range in b are expected too.
func (s *Sink) present(ctx context.Context, t *table, id twophase.BatchID, b *block, all map[partKey][]int64) (bool, error) {
	for _, r := range b.runs(id) {
		if len(r.offs) == 0 {
			continue
		}
		lo, hi := r.offs[0], r.offs[len(r.offs)-1]
		want := 0
		for _, o := range all[r.key] {
			if o >= lo && o <= hi {
				want++
			}
		}
		var n uint64
		err := s.conn.QueryRow(ctx, "SELECT count() FROM "+t.Ident+" WHERE "+quoteIdent(ColTopic)+" = ? AND "+quoteIdent(ColPartition)+" = ? AND "+
			quoteIdent(ColOffset)+" >= ? AND "+quoteIdent(ColOffset)+" <= ?", r.key.topic, r.key.partition, lo, hi).Scan(&n)
		if err != nil {
			return false, fmt.Errorf("clickhouse: presence check in %s: %w", t.Ident, err)
		}
		if n < uint64(want) {
			return false, nil
		}
	}
	return true, nil
}

// redoRisk estimates whether the de-duplication window of t may have
// turned over since the batch's intent was written: for a replicated table
// from ZooKeeper's block ids (all writers); otherwise (plain MergeTree with
// tokens, or no system.zookeeper) from system.part_log's new parts (all
// writers); where the server keeps no part_log, from the blocks this
// connector inserted since. It logs and counts the risk.
func (s *Sink) redoRisk(ctx context.Context, in intent, t *table, checked bool) {
	window := t.Engine.Window
	var since uint64
	var how string
	if t.Engine.Replicated && t.Engine.ZooKeeperPath != "" && s.feat.ZooKeeper {
		var n uint64
		var oldest time.Time
		err := s.conn.QueryRow(ctx, "SELECT count(), min(ctime) FROM system.zookeeper WHERE path = ?", t.Engine.ZooKeeperPath+"/blocks").Scan(&n, &oldest)
		if err == nil {
			how = fmt.Sprintf("ZooKeeper keeps %d block ids, the oldest from %s; intent written %s", n, oldest.UTC().Format(time.RFC3339), in.PreparedAt.UTC().Format(time.RFC3339))
			// Second resolution on both sides: equal counts as turned over
			// (a warning too many rather than one too few).
			if n >= uint64(window) && !oldest.Before(in.PreparedAt) {
				since = uint64(window)
			}
		}
	}
	if how == "" {
		if n, err := s.partsSince(ctx, t, in.PreparedAt); err == nil {
			since = n
			how = fmt.Sprintf("system.part_log shows %d parts written into the table since the intent (%s), by any writer", n, in.PreparedAt.UTC().Format(time.RFC3339))
		} else {
			s.log.Info("no system.part_log to measure the de-duplication window with (enable part_log to see other writers); counting this connector's blocks", "table", t.Name, "err", err)
		}
	}
	if how == "" {
		n, err := s.st.blocksSince(ctx, in.ID.Connector, in.Target, in.PreparedAt)
		if err != nil {
			s.log.Warn("cannot estimate the de-duplication window risk of a redo", "batch", in.ID.String(), "err", err)
			return
		}
		since = n
		how = fmt.Sprintf("this connector inserted %d blocks into the table since the intent", n)
	}
	s.log.Info("redo of a decided batch from Kafka", "batch", in.ID.String(), "table", t.Name, "mechanism", in.Mechanism, "window", window, "presence_check", checked, "estimate", how)
	if window > 0 && since < uint64(window) {
		return
	}
	if checked {
		s.log.Info("de-duplication window may have turned over since the batch's intent; blocks are checked for presence instead", "batch", in.ID.String(), "table", t.Name, "window", window)
		return
	}
	total := s.stats.risk.Add(1)
	s.log.Warn("DEDUP WINDOW RISK: the table's de-duplication window may have turned over since this batch's interrupted insert; a redo of blocks inserted before the crash can duplicate them. Add the coordinate columns __connect_topic, __connect_partition, __connect_offset (presence check) or raise the window",
		"batch", in.ID.String(), "table", t.Name, "window", window, "estimate", how, "dedup_window_risk_total", total)
}

// partsSince counts the parts written into t by any writer since at (second
// resolution, the same second included), from system.part_log after asking
// the server to flush it (best effort: a user without the SYSTEM FLUSH LOGS
// grant sees what the log already holds). Every inserted part takes a place
// in the table's de-duplication log, so this is how far its window moved.
func (s *Sink) partsSince(ctx context.Context, t *table, at time.Time) (uint64, error) {
	_ = s.conn.Exec(ctx, "SYSTEM FLUSH LOGS")
	var n uint64
	err := s.conn.QueryRow(ctx, "SELECT count() FROM system.part_log WHERE database = ? AND table = ? AND event_type = 'NewPart' AND event_time >= ?",
		t.DB, t.Name, at).Scan(&n)
	return n, err
}

// Abort implements twophase.Participant: it marks the batch's pending
// intents aborted. Aborting a batch with no pending intent returns nil.
func (s *Sink) Abort(ctx context.Context, id twophase.BatchID) error {
	defer s.dropCache(id)
	ins, err := s.st.intentsOf(ctx, id)
	if err != nil {
		return err
	}
	for _, in := range ins {
		if in.Status == statusPending {
			if err := s.st.writeIntent(ctx, in, statusAborted, ""); err != nil {
				return err
			}
		}
	}
	return nil
}

// InDoubt implements twophase.Participant: the connector's intents that are
// neither done nor aborted.
func (s *Sink) InDoubt(ctx context.Context, connector string) ([]twophase.BatchID, error) {
	ins, err := s.st.pending(ctx, connector)
	if err != nil {
		return nil, err
	}
	out := make([]twophase.BatchID, 0, len(ins))
	for _, in := range ins {
		out = append(out, in.ID)
	}
	return out, nil
}

// Acquire implements connectors.Sink: it refuses (offsets.ErrBusy) while an
// intent of the partitions is in doubt, then writes a new fence
// max(old + 1, now in ms) for every partition in one insert and returns the
// positions.
func (s *Sink) Acquire(ctx context.Context, topic string, partitions []int32) (map[int32]offsets.Position, error) {
	if err := s.busy(ctx, topic, partitions); err != nil {
		return nil, err
	}
	cur, err := s.st.positions(ctx, s.cfg.Connector, topic)
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixMilli()
	out := make(map[int32]offsets.Position, len(partitions))
	var rows []offsets.Position
	for _, p := range partitions {
		pos, ok := cur[topic][p]
		if !ok {
			pos = offsets.Position{Topic: topic, Partition: p, Next: offsets.Unset}
		}
		pos.Fence = max(pos.Fence+1, now)
		pos.UpdatedAt = time.Now()
		out[p] = pos
		rows = append(rows, pos)
	}
	if err := s.st.writePositions(ctx, s.cfg.Connector, rows); err != nil {
		return nil, fmt.Errorf("offsets: acquire %s/%s: %w", s.cfg.Connector, topic, err)
	}
	return out, nil
}

// busy returns an error wrapping offsets.ErrBusy when an intent of one of
// the partitions is in doubt.
func (s *Sink) busy(ctx context.Context, topic string, partitions []int32) error {
	ins, err := s.st.pending(ctx, s.cfg.Connector)
	if err != nil {
		return err
	}
	for _, in := range ins {
		for _, p := range partitions {
			if in.ID.Topic == topic && in.ID.Partition == p {
				return fmt.Errorf("offsets: %s: intent %s is in doubt: %w", s.cfg.Connector, in.ID, offsets.ErrBusy)
			}
		}
	}
	return nil
}

// Initialize implements connectors.Sink: it stores the first position of a
// partition while the fence is still fence (checked, not compare-and-set).
func (s *Sink) Initialize(ctx context.Context, topic string, partition int32, fence, next int64) error {
	pos, ok, err := s.st.lookup(ctx, s.cfg.Connector, topic, partition)
	if err != nil {
		return err
	}
	if !ok || pos.Fence != fence || (pos.Next != offsets.Unset && pos.Next != next) {
		return &offsets.FencedError{Connector: s.cfg.Connector, Topic: topic, Partition: partition, WantNext: next, Fence: fence, GotNext: pos.Next, GotFenc: pos.Fence}
	}
	return s.st.writePositions(ctx, s.cfg.Connector, []offsets.Position{{Topic: topic, Partition: partition, Next: next, Fence: fence}})
}

// Positions implements connectors.Sink.
func (s *Sink) Positions(ctx context.Context) ([]offsets.Position, error) {
	all, err := s.st.positions(ctx, s.cfg.Connector, "")
	if err != nil {
		return nil, err
	}
	var out []offsets.Position
	for _, ps := range all {
		for _, p := range ps {
			out = append(out, p)
		}
	}
	sortPositions(out)
	return out, nil
}

func sortPositions(ps []offsets.Position) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && (ps[j].Topic < ps[j-1].Topic || ps[j].Topic == ps[j-1].Topic && ps[j].Partition < ps[j-1].Partition); j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// ResetOffsets implements connectors.Sink: every listed partition gets the
// given next_offset (Unset: offsets.initial applies again) and a new fence,
// so a live owner's next Prepare or Commit is refused. With all=true every
// stored partition is reset to Unset first. It refuses (offsets.ErrBusy)
// while an intent of the connector is in doubt.
func (s *Sink) ResetOffsets(ctx context.Context, all bool, positions []offsets.Position) error {
	if ins, err := s.st.pending(ctx, s.cfg.Connector); err != nil {
		return err
	} else if len(ins) > 0 {
		return fmt.Errorf("offsets: reset %s: %d intents in doubt (%s…): %w", s.cfg.Connector, len(ins), ins[0].ID, offsets.ErrBusy)
	}
	cur, err := s.st.positions(ctx, s.cfg.Connector, "")
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	next := map[string]map[int32]offsets.Position{}
	set := func(p offsets.Position) {
		old := cur[p.Topic][p.Partition]
		p.Fence = max(old.Fence+1, now)
		if next[p.Topic] == nil {
			next[p.Topic] = map[int32]offsets.Position{}
		}
		next[p.Topic][p.Partition] = p
	}
	if all {
		for t, ps := range cur {
			for p := range ps {
				set(offsets.Position{Topic: t, Partition: p, Next: offsets.Unset})
			}
		}
	}
	for _, p := range positions {
		set(offsets.Position{Topic: p.Topic, Partition: p.Partition, Next: p.Next})
	}
	var rows []offsets.Position
	for _, ps := range next {
		for _, p := range ps {
			rows = append(rows, p)
		}
	}
	sortPositions(rows)
	return s.st.writePositions(ctx, s.cfg.Connector, rows)
}

// ErrNoLocalTransactions is returned by WriteLocal for exactly_once_sink:
// ClickHouse cannot commit rows and an offset atomically.
var ErrNoLocalTransactions = errors.New("clickhouse: delivery.guarantee=exactly_once_sink needs transactions, which ClickHouse does not offer: use exactly_once (intents + de-duplicated inserts) or at_least_once")

// ReadsKeys implements connectors.KeyReader: with delete.enabled a
// tombstone's key says which row it deletes.
func (s *Sink) ReadsKeys() bool { return s.cfg.DeleteEnabled }

// Guarantees implements connectors.Sink: every guarantee but
// exactly_once_sink, which needs transactions (ErrNoLocalTransactions).
func (s *Sink) Guarantees() (connectors.Guarantees, error) {
	return connectors.GuaranteesOf(connectors.TwoPhase, connectors.AtLeastOnce, connectors.AtMostOnce), ErrNoLocalTransactions
}

// WriteLocal implements connectors.LocalWriter for at_least_once
// (RowsFirst: rows, then the offset) and at_most_once (OffsetFirst), the
// local guarantees the sink declares.
func (s *Sink) WriteLocal(ctx context.Context, b *twophase.Batch, guard offsets.Guard, order connectors.Order) error {
	if len(b.Records) == 0 {
		return nil
	}
	p, err := s.buildBatch(ctx, b)
	if err != nil {
		return err
	}
	rows := func() error {
		for _, blk := range p.blocks {
			if err := s.insert(ctx, blk.T.Ident, blk); err != nil {
				return err
			}
		}
		if p.dlq != nil {
			dt, err := s.dlqTable(ctx)
			if err != nil {
				return err
			}
			return s.insert(ctx, dt.Ident, p.dlq)
		}
		return nil
	}
	advance := func() error {
		return s.st.writePositions(ctx, s.cfg.Connector, []offsets.Position{{Topic: b.ID.Topic, Partition: b.ID.Partition, Next: b.ID.NextOffset(), Fence: b.Fence}})
	}
	first, second := rows, advance
	if order == connectors.OffsetFirst {
		first, second = advance, rows
	}
	if err := first(); err != nil {
		return err
	}
	failpoint.HitIn(s.cfg.Connector, failpoint.AfterWrite)
	return second()
}

// Preflight implements connectors.Sink. It refuses exactly_once on a
// table the server cannot de-duplicate, saying what to change; it reports
// the mechanism per table and whether the server has experimental
// transactions. (exactly_once_sink is not among the declared guarantees:
// the runtime refuses it before Preflight.)
func (s *Sink) Preflight(ctx context.Context, g connectors.Guarantee) error {
	f := s.feat
	s.log.Info("ClickHouse server", "version", f.Version.String(), "dedup_token", f.DedupToken, "insert_deduplicate", f.InsertDeduplicate,
		"replicated_window", f.ReplicatedWindow, "non_replicated_window", f.NonReplicatedWindow, "zookeeper", f.ZooKeeper, "experimental_transactions", f.Transactions)
	if f.Transactions {
		s.log.Info("the server has experimental transactions enabled; txsink does not use them (intents + de-duplicated inserts work on every version; see docs/clickhouse.md)")
	}
	var errs []error
	for _, topic := range s.cfg.Topics {
		name, err := (&record.Record{Topic: topic}).TableName(s.cfg.TableNameFormat)
		if err != nil {
			continue // routed by the change events' source: the tables are known from the records
		}
		t, err := loadTable(ctx, s.conn, s.feat, s.cfg.Database, name)
		if errors.Is(err, ErrTableNotFound) {
			if !s.cfg.AutoCreate {
				errs = append(errs, fmt.Errorf("preflight: table %s does not exist: create it or set auto.create=true", tableIdent(s.cfg.Database, name)))
				continue
			}
			if g == connectors.TwoPhase && s.cfg.AutoEngine == "" && !(f.DedupToken && s.cfg.Dedup != "blocks") && !s.canReplicate() {
				errs = append(errs, fmt.Errorf("preflight: delivery.guarantee=exactly_once with auto.create on ClickHouse %s: the server has no insert_deduplication_token and no ZooKeeper with {shard}/{replica} macros for a Replicated table: configure ZooKeeper (or ClickHouse Keeper) and macros, set auto.create.engine to a Replicated*MergeTree, or upgrade ClickHouse to 22.2+", f.Version))
			}
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("preflight: %w", err))
			continue
		}
		if s.cfg.DeleteEnabled {
			if err := s.checkDeletes(t); err != nil {
				errs = append(errs, err)
			}
		}
		if g != connectors.TwoPhase {
			continue
		}
		mech, why := s.mechanismFor(t)
		if mech == MechNone {
			errs = append(errs, fmt.Errorf("preflight: delivery.guarantee=exactly_once cannot be honoured on table %s: %s; or use delivery.guarantee=at_least_once", t.Ident, why))
			continue
		}
		s.mu.Lock()
		s.mechs[name] = mech
		s.mu.Unlock()
		s.log.Info("exactly_once de-duplication", "table", name, "engine", t.Engine.Name, "mechanism", mech, "window_blocks", t.Engine.Window, "coordinate_columns", t.hasCoordinates())
		if !t.hasCoordinates() {
			s.log.Warn("table has no coordinate columns (__connect_topic, __connect_partition, __connect_offset): a redo after more than the de-duplication window of other inserts cannot be checked and may duplicate", "table", name, "window_blocks", t.Engine.Window)
			if mech == MechBlocks {
				s.log.Warn("identical-block de-duplication without coordinate columns also drops a later batch whose block is byte-identical to an earlier one: add the coordinate columns", "table", name)
			}
		}
	}
	if g == connectors.TwoPhase && s.cfg.ErrorsTolerance == "all" {
		if t, err := loadTable(ctx, s.conn, s.feat, s.cfg.Database, s.cfg.DLQTable); err == nil {
			if mech, why := s.mechanismFor(t); mech == MechNone {
				errs = append(errs, fmt.Errorf("preflight: dead-letter table %s cannot de-duplicate a redo: %s", t.Ident, why))
			}
		} else if errors.Is(err, ErrTableNotFound) && !(f.DedupToken && s.cfg.Dedup != "blocks") && !s.canReplicate() {
			errs = append(errs, fmt.Errorf("preflight: the dead-letter table %s would be created without de-duplication on ClickHouse %s: create it as a Replicated*MergeTree table or configure ZooKeeper and macros", s.cfg.DLQTable, f.Version))
		}
	}
	return errors.Join(errs...)
}

// checkDeletes refuses delete.enabled on a table that cannot apply
// deletion rows.
func (s *Sink) checkDeletes(t *table) error {
	if !t.Engine.Replacing {
		return fmt.Errorf("preflight: delete.enabled needs a ReplacingMergeTree(%s, %s) table; %s is %s", s.cfg.VersionColumn, s.cfg.DeletedColumn, t.Ident, t.Engine.Name)
	}
	if !s.feat.IsDeleted {
		return fmt.Errorf("preflight: delete.enabled needs ReplacingMergeTree's is_deleted column (ClickHouse 23.2+); ClickHouse %s has none: leave delete.enabled=false (tombstones are then bad records) or upgrade", s.feat.Version)
	}
	if c := t.column(s.cfg.DeletedColumn); c == nil || !strings.Contains(t.Engine.Full, s.cfg.DeletedColumn) {
		return fmt.Errorf("preflight: delete.enabled: table %s must have the UInt8 column %s as ReplacingMergeTree's is_deleted argument", t.Ident, s.cfg.DeletedColumn)
	}
	return nil
}

// Close implements connectors.Sink: it stops the intents cleanup (a
// deletion already submitted completes on the server) and closes the
// connection.
func (s *Sink) Close() {
	if s.stopCleanup != nil {
		s.stopCleanup()
	}
	_ = s.conn.Close()
}
