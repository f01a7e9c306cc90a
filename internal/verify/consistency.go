package verify

// Consistency sampling (txsink verify -consistency N): while replication
// runs, the target is sampled repeatedly, each sample one snapshot of its
// tables, and every sample must equal the source as of some source commit:
// a prefix of the source's commit order, for the tables compared.
//
// The source's history is what Debezium recorded of it: the transaction
// topic (provide.transaction.metadata=true) gives the commit order (the
// order of the END events), and the change events give each row's
// versions, each named by its source LSN. A target row names the version
// it holds by its __lsn column (cdc.columns). A sample is consistent when
// one prefix k of the commit order makes every key's state (absent, or the
// version of that LSN) the state the key had after the first k
// transactions. The first torn transaction is the lowest one a sample
// holds in part: some of its changes shown, some not.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
)

// ConsistencyOptions configure consistency sampling.
type ConsistencyOptions struct {
	Bootstrap string
	KafkaOpts []kgo.Opt
	// Topics are the source connector's change-event topics, TxnTopic its
	// transaction topic; both with Kafka Connect's JSON converter.
	Topics   []string
	TxnTopic string
	// SinkURL is the target PostgreSQL database, Schema the target
	// tables' schema (default public); a source table's copy has its name
	// (table.name.format=${source.table}).
	SinkURL, Schema string
	// LSNColumn holds each row's source LSN (default __lsn).
	LSNColumn string
	// Samples is the number of samples, Interval the pause between them.
	Samples  int
	Interval time.Duration
}

// ConsistencyReport is the result of consistency sampling.
type ConsistencyReport struct {
	Samples      int `json:"samples"`
	Consistent   int `json:"consistent"`
	Torn         int `json:"torn"`
	Transactions int `json:"transactions"` // ENDs read from the transaction topic
	// Prefixes are the distinct source commits the samples equalled.
	Prefixes  int        `json:"distinct_prefixes"`
	FirstTorn *TornState `json:"first_torn,omitempty"`
}

// OK reports whether every sample was consistent.
func (r ConsistencyReport) OK() bool { return r.Samples > 0 && r.Torn == 0 }

// TornState is a sample that equals no state of the source.
type TornState struct {
	Sample int `json:"sample"`
	// Txn is the first transaction the sample holds in part (its id, its
	// place in the commit order from 1, and the tables whose rows show
	// the tear).
	Txn    string   `json:"transaction"`
	Order  int      `json:"order"`
	Tables []string `json:"tables"`
	Detail string   `json:"detail"`
}

// rowVersion is one version of a key: the LSN of the change that made it,
// the transaction that made it (its place in the commit order; 0 for a
// snapshot row), and whether it is a deletion.
type rowVersion struct {
	lsn     int64
	txn     string
	deleted bool
}

type rowKey struct{ table, key string }

// history is the source's history as Debezium recorded it.
type history struct {
	mu       sync.Mutex
	order    map[string]int // transaction id → place in the commit order, from 1
	ids      []string
	versions map[rowKey][]rowVersion
	pos      map[string]map[int32]int64 // next offset read
}

func newHistory() *history {
	return &history{order: map[string]int{}, versions: map[rowKey][]rowVersion{}, pos: map[string]map[int32]int64{}}
}

// Consistency samples the target opts.Samples times.
func Consistency(ctx context.Context, opts ConsistencyOptions) (ConsistencyReport, error) {
	var rep ConsistencyReport
	if opts.Schema == "" {
		opts.Schema = "public"
	}
	if opts.LSNColumn == "" {
		opts.LSNColumn = "__lsn"
	}
	if opts.TxnTopic == "" || len(opts.Topics) == 0 {
		return rep, errors.New("consistency: the change-event topics and the transaction topic are needed")
	}
	cl, err := kgo.NewClient(append(slices.Clone(opts.KafkaOpts), kgo.SeedBrokers(strings.Split(opts.Bootstrap, ",")...),
		kgo.ConsumeTopics(append(slices.Clone(opts.Topics), opts.TxnTopic)...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	if err != nil {
		return rep, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	conn, err := pgx.Connect(ctx, opts.SinkURL)
	if err != nil {
		return rep, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	h := newHistory()
	prefixes := map[int]bool{}
	for i := 1; i <= opts.Samples; i++ {
		sample, err := snapshot(ctx, conn, opts)
		if err != nil {
			return rep, fmt.Errorf("sample %d: %w", i, err)
		}
		// Everything the sample holds was in Kafka before it was taken.
		ends, err := adm.ListEndOffsets(ctx, append(slices.Clone(opts.Topics), opts.TxnTopic)...)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return rep, err
		}
		if err := h.readTo(ctx, cl, ends); err != nil {
			return rep, err
		}
		rep.Samples++
		k, torn := h.check(sample)
		if torn == nil {
			rep.Consistent++
			prefixes[k] = true
		} else {
			rep.Torn++
			if rep.FirstTorn == nil {
				torn.Sample = i
				rep.FirstTorn = torn
			}
		}
		if i < opts.Samples && opts.Interval > 0 {
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(opts.Interval):
			}
		}
	}
	rep.Transactions, rep.Prefixes = len(h.ids), len(prefixes)
	return rep, nil
}

// snapshot reads every target table that exists, in one REPEATABLE READ
// transaction: key text → LSN, per table.
func snapshot(ctx context.Context, conn *pgx.Conn, opts ConsistencyOptions) (map[string]map[string]int64, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	rows, err := tx.Query(ctx, `SELECT c.relname, array_agg(a.attname::text ORDER BY k.n)
		FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
		WHERE s.nspname = $1 AND EXISTS (SELECT 1 FROM pg_attribute l WHERE l.attrelid = c.oid AND l.attname = $2 AND NOT l.attisdropped)
		GROUP BY c.relname`, opts.Schema, opts.LSNColumn)
	if err != nil {
		return nil, err
	}
	pks := map[string][]string{}
	for rows.Next() {
		var t string
		var cols []string
		if err := rows.Scan(&t, &cols); err != nil {
			return nil, err
		}
		pks[t] = cols
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := map[string]map[string]int64{}
	for t, cols := range pks {
		parts := make([]string, len(cols))
		for i, c := range cols {
			parts[i] = pgx.Identifier{c}.Sanitize() + "::text"
		}
		q := fmt.Sprintf("SELECT concat_ws(chr(1), %s), %s FROM %s", strings.Join(parts, ", "),
			pgx.Identifier{opts.LSNColumn}.Sanitize(), pgx.Identifier{opts.Schema, t}.Sanitize())
		rows, err := tx.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		m := map[string]int64{}
		for rows.Next() {
			var k string
			var lsn *int64
			if err := rows.Scan(&k, &lsn); err != nil {
				return nil, err
			}
			if lsn == nil {
				return nil, fmt.Errorf("%s.%s: a row with a null %s (cdc.columns must include it)", opts.Schema, t, opts.LSNColumn)
			}
			m[k] = *lsn
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		out[t] = m
	}
	return out, tx.Commit(ctx)
}

// readTo consumes until every partition reached ends.
func (h *history) readTo(ctx context.Context, cl *kgo.Client, ends kadm.ListedOffsets) error {
	reached := func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 && h.pos[o.Topic][o.Partition] < o.Offset {
				done = false
			}
		})
		return done
	}
	for !reached() {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
				ferr = fmt.Errorf("%s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			if err := h.add(r); err != nil && bad == nil {
				bad = err
			}
		})
		if bad != nil {
			return bad
		}
	}
	return nil
}

// payload returns a Kafka Connect JSON value's payload (the value itself
// without schemas).
func payload(b []byte) json.RawMessage {
	var env struct {
		Schema  json.RawMessage `json:"schema"`
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(b, &env) == nil && env.Schema != nil && env.Payload != nil {
		return env.Payload
	}
	return b
}

// keyText is a key's fields' values in order, as PostgreSQL prints them,
// joined by \x01 (as snapshot joins the primary key's columns).
func keyText(b []byte) (string, error) {
	d := json.NewDecoder(bytes.NewReader(payload(b)))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return "", fmt.Errorf("key %s is not a JSON object", b)
	}
	var parts []string
	for d.More() {
		if _, err := d.Token(); err != nil { // the name
			return "", err
		}
		var v any
		if err := d.Decode(&v); err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprint(v))
	}
	return strings.Join(parts, "\x01"), nil
}

func (h *history) add(r *kgo.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pos[r.Topic] == nil {
		h.pos[r.Topic] = map[int32]int64{}
	}
	h.pos[r.Topic][r.Partition] = r.Offset + 1
	if r.Value == nil {
		return nil // a tombstone: the delete event before it said it
	}
	var ev struct {
		Status string `json:"status"`
		ID     string `json:"id"`
		Op     string `json:"op"`
		Source struct {
			Table string `json:"table"`
			LSN   int64  `json:"lsn"`
		} `json:"source"`
		Transaction *struct {
			ID string `json:"id"`
		} `json:"transaction"`
	}
	if err := json.Unmarshal(payload(r.Value), &ev); err != nil {
		return fmt.Errorf("%s[%d]@%d: not a JSON change event: %v", r.Topic, r.Partition, r.Offset, err)
	}
	if ev.Status != "" {
		if id := record.TxnID(ev.ID); ev.Status == "END" {
			if _, ok := h.order[id]; !ok {
				h.ids = append(h.ids, id)
				h.order[id] = len(h.ids)
			}
		}
		return nil
	}
	if ev.Op == "" || ev.Source.Table == "" {
		return nil
	}
	key, err := keyText(r.Key)
	if err != nil {
		return fmt.Errorf("%s[%d]@%d: %v", r.Topic, r.Partition, r.Offset, err)
	}
	v := rowVersion{lsn: ev.Source.LSN, deleted: ev.Op == "d"}
	if ev.Transaction != nil {
		v.txn = record.TxnID(ev.Transaction.ID)
	}
	k := rowKey{ev.Source.Table, key}
	h.versions[k] = append(h.versions[k], v)
	return nil
}

// check finds a prefix k of the commit order whose state the sample
// equals, or the first transaction it holds in part.
func (h *history) check(sample map[string]map[string]int64) (int, *TornState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.ids)
	inf := n + 1
	place := func(txn string) int {
		if txn == "" {
			return 0
		}
		if p, ok := h.order[txn]; ok {
			return p
		}
		return inf // no END read yet: after every known commit
	}
	// Each key allows a union of intervals of k in [0, n]; the sample is
	// consistent at k when every key allows k.
	type interval struct{ lo, hi int } // inclusive
	cover := make([]int, n+2)
	keys := 0
	type why struct {
		k      rowKey
		allows []interval
		vs     []rowVersion
		lsn    int64
		has    bool
	}
	var all []why
	allow := func(w why) {
		keys++
		all = append(all, w)
		for _, iv := range w.allows {
			lo, hi := max(iv.lo, 0), min(iv.hi, n)
			if lo <= hi {
				cover[lo]++
				cover[hi+1]--
			}
		}
	}
	seen := map[rowKey]bool{}
	for k, vs := range h.versions {
		if _, ok := sample[k.table]; !ok {
			continue // a table the target does not have (yet): compared once it does
		}
		seen[k] = true
		lsn, has := sample[k.table][k.key]
		w := why{k: k, vs: vs, lsn: lsn, has: has}
		// The key's state before its first version is absence; version
		// j holds from its transaction's place to the next version's.
		prev := 0
		prevAbsent, prevLSN := true, int64(0)
		for j, v := range vs {
			p := place(v.txn)
			if j == 0 && p > 0 {
				if !has {
					w.allows = append(w.allows, interval{0, p - 1})
				}
			} else if j > 0 && ((!has && prevAbsent) || (has && !prevAbsent && prevLSN == lsn)) {
				w.allows = append(w.allows, interval{prev, p - 1})
			}
			prev, prevAbsent, prevLSN = p, v.deleted, v.lsn
		}
		if (!has && prevAbsent) || (has && !prevAbsent && prevLSN == lsn) {
			w.allows = append(w.allows, interval{prev, n})
		}
		allow(w)
	}
	for t, rows := range sample {
		for key, lsn := range rows {
			if k := (rowKey{t, key}); !seen[k] {
				// A row no change event made: no prefix has it.
				allow(why{k: k, lsn: lsn, has: true})
			}
		}
	}
	best, bestK := -1, 0
	run := 0
	for k := 0; k <= n; k++ {
		run += cover[k]
		if run == keys {
			return k, nil
		}
		if run > best {
			best, bestK = run, k
		}
	}
	// Torn: at the best prefix, the keys that disagree name the
	// transactions shown in part; report the lowest.
	tornAt, tables := inf+1, map[string]bool{}
	detail := ""
	for _, w := range all {
		ok := false
		for _, iv := range w.allows {
			if iv.lo <= bestK && bestK <= iv.hi {
				ok = true
			}
		}
		if ok {
			continue
		}
		t, d := describeTear(w.k, w.vs, w.has, w.lsn, bestK, inf, place)
		if t < tornAt {
			tornAt, tables, detail = t, map[string]bool{}, d
		}
		if t == tornAt {
			tables[w.k.table] = true
		}
	}
	ts := make([]string, 0, len(tables))
	for t := range tables {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	st := &TornState{Order: tornAt, Tables: ts, Detail: detail}
	switch {
	case tornAt == 0:
		st.Txn = "(snapshot)"
	case tornAt <= n:
		st.Txn = h.ids[tornAt-1]
	default:
		st.Txn = "(none: a row no change event made)"
	}
	return 0, st
}

// describeTear says how one key of a torn sample differs from the state
// at prefix k: the transaction (its place) whose change the key shows or
// lacks against the rest of the sample.
func describeTear(key rowKey, vs []rowVersion, has bool, lsn int64, k, inf int, place func(string) int) (int, string) {
	name := fmt.Sprintf("%s key %q", key.table, strings.ReplaceAll(key.key, "\x01", ","))
	at := -1 // the version current at k
	for j, v := range vs {
		if place(v.txn) <= k {
			at = j
		}
	}
	held := -1 // the version the sample holds
	for j, v := range vs {
		if has && v.lsn == lsn {
			held = j
		}
	}
	switch {
	case len(vs) == 0 || has && held < 0:
		return inf, fmt.Sprintf("%s: the sample holds LSN %d, which no change event read has", name, lsn)
	case has && held > at:
		t := place(vs[held].txn)
		return t, fmt.Sprintf("%s: the sample holds the change (LSN %d) of the transaction committed %d, and lacks a change of one committed before it", name, lsn, t)
	case has:
		t := place(vs[held+1].txn)
		return t, fmt.Sprintf("%s: the sample lacks the change of the transaction committed %d (it holds the older LSN %d)", name, t, lsn)
	case at >= 0 && place(vs[at].txn) == 0:
		return 0, fmt.Sprintf("%s: the sample lacks the row's snapshot", name)
	case at >= 0:
		t := place(vs[at].txn)
		return t, fmt.Sprintf("%s: the sample lacks the row written by the transaction committed %d", name, t)
	}
	return inf, name + ": differs"
}
