package integration

// The replication test's source workload: random inserts, updates
// (some of them primary key changes) and deletes on the three source
// tables, in transactions of 1 to 20 changes, with the schema changes
// made between them at set points.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// keySet is a set of keys with a uniform random pick.
type keySet[K comparable] struct {
	keys []K
	at   map[K]int
}

func (s *keySet[K]) add(k K) {
	if s.at == nil {
		s.at = map[K]int{}
	}
	s.at[k] = len(s.keys)
	s.keys = append(s.keys, k)
}

func (s *keySet[K]) remove(k K) {
	i := s.at[k]
	last := s.keys[len(s.keys)-1]
	s.keys[i], s.at[last] = last, i
	s.keys = s.keys[:len(s.keys)-1]
	delete(s.at, k)
}

func (s *keySet[K]) has(k K) bool { _, ok := s.at[k]; return ok }

func (s *keySet[K]) pick(r *rand.Rand) K { return s.keys[r.IntN(len(s.keys))] }

// replStats counts what the workload did.
type replStats struct {
	changes, inserts, updates, keyChanges, deletes, txns, rows int64
}

// replWorkload makes the changes. Only run's goroutine touches its model;
// done and stats are safe to read meanwhile.
type replWorkload struct {
	url  string
	seed uint64
	rng  *rand.Rand
	done atomic.Int64

	mu sync.Mutex
	st replStats

	customers, orders *idTable
	lines             keySet[[2]int64]
	nextLine          map[int64]int64
	altered           int
}

// idTable is a source table keyed by one integer column, id.
type idTable struct {
	name  string
	keys  keySet[int64]
	next  int64
	param func(int64) any // an id as its column's Go type
}

// insert takes a new id.
func (t *idTable) insert() int64 {
	id := t.next
	t.next++
	t.keys.add(id)
	return id
}

// rekey queues a primary key change of a random row.
func (t *idTable) rekey(b *pgx.Batch, r *rand.Rand) {
	old := t.keys.pick(r)
	t.keys.remove(old)
	id := t.insert()
	b.Queue(`UPDATE `+t.name+` SET id = $1 WHERE id = $2`, t.param(id), t.param(old))
}

// delete queues the delete of a random row.
func (t *idTable) delete(b *pgx.Batch, r *rand.Rand) {
	id := t.keys.pick(r)
	t.keys.remove(id)
	b.Queue(`DELETE FROM `+t.name+` WHERE id = $1`, t.param(id))
}

// newReplWorkload makes a workload on the source database; the seed comes
// from TXSINK_TEST_REPL_SEED or the clock.
func newReplWorkload(url string) *replWorkload {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TXSINK_TEST_REPL_SEED"); s != "" {
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			seed = n
		}
	}
	return &replWorkload{url: url, seed: seed, rng: rand.New(rand.NewPCG(seed, 15)), nextLine: map[int64]int64{},
		customers: &idTable{name: "customers", next: 1, param: func(id int64) any { return id }},
		orders:    &idTable{name: "orders", next: 1, param: func(id int64) any { return int32(id) }}}
}

func (w *replWorkload) stats() replStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.rows = int64(len(w.customers.keys.keys) + len(w.orders.keys.keys) + len(w.lines.keys))
	return st
}

// run makes n changes, the alters at evenly spaced points between them.
func (w *replWorkload) run(ctx context.Context, n int, alters []string) error {
	cfg, err := pgx.ParseConfig(w.url)
	if err != nil {
		return err
	}
	// The source's durability is not under test: commits need not wait
	// for the disk (they are in the WAL that Debezium decodes either way).
	cfg.RuntimeParams["synchronous_commit"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for w.done.Load() < int64(n) {
		if w.altered < len(alters) && w.done.Load() >= int64(n)*int64(w.altered+1)/int64(len(alters)+1) {
			if _, err := conn.Exec(ctx, alters[w.altered]); err != nil {
				return fmt.Errorf("%s: %w", alters[w.altered], err)
			}
			w.altered++
			continue
		}
		size := min(1+w.rng.IntN(20), n-int(w.done.Load()))
		b := &pgx.Batch{}
		var st replStats
		for range size {
			w.change(b, &st)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		w.mu.Lock()
		w.st.changes += int64(size)
		w.st.inserts += st.inserts
		w.st.updates += st.updates
		w.st.keyChanges += st.keyChanges
		w.st.deletes += st.deletes
		w.st.txns++
		w.mu.Unlock()
		w.done.Add(int64(size))
	}
	return nil
}

// op picks what to do to a table of size rows.
func (w *replWorkload) op(size int) string {
	if size < 50 {
		return "insert"
	}
	switch r := w.rng.IntN(100); {
	case r < 40:
		return "insert"
	case r < 75:
		return "update"
	case r < 85:
		return "key"
	}
	return "delete"
}

// change queues one random row change.
func (w *replWorkload) change(b *pgx.Batch, st *replStats) {
	count := func(op string) {
		switch op {
		case "insert":
			st.inserts++
		case "update":
			st.updates++
		case "key":
			st.keyChanges++
		case "delete":
			st.deletes++
		}
	}
	r := w.rng
	switch r.IntN(3) {
	case 0:
		op := w.op(len(w.customers.keys.keys))
		count(op)
		tier := w.altered > 0
		switch op {
		case "insert":
			b.Queue(insertSQL("customers", w.customerCols()), w.customerRow(w.customers.insert(), tier)...)
		case "update":
			id := w.customers.keys.pick(r)
			switch v := w.customerRow(id, tier); r.IntN(3) {
			case 0:
				b.Queue(`UPDATE customers SET score = $2 WHERE id = $1`, id, v[3])
			case 1:
				b.Queue(`UPDATE customers SET balance = $2::text::numeric, active = NOT active WHERE id = $1`, id, v[6])
			default:
				b.Queue(updateSQL("customers", w.customerCols()), v...)
			}
		case "key":
			w.customers.rekey(b, r)
		case "delete":
			w.customers.delete(b, r)
		}
	case 1:
		op := w.op(len(w.orders.keys.keys))
		count(op)
		prio := w.altered > 1
		switch op {
		case "insert":
			b.Queue(insertSQL("orders", w.orderCols()), w.orderRow(w.orders.insert(), prio)...)
		case "update":
			id := w.orders.keys.pick(r)
			v := w.orderRow(id, prio)
			switch {
			case r.IntN(3) == 0:
				// Leaves note, maybe a TOASTed value, unchanged.
				b.Queue(`UPDATE orders SET status = $2 WHERE id = $1`, int32(id), v[2])
			case prio && r.IntN(2) == 0:
				b.Queue(`UPDATE orders SET status = $2, priority = $3 WHERE id = $1`, int32(id), v[2], v[7])
			default:
				b.Queue(`UPDATE orders SET status = $2, total = $3::text::numeric, placed_at = $4::text::timestamptz, note = $5 WHERE id = $1`,
					int32(id), v[2], v[3], v[4], v[6])
			}
		case "key":
			w.orders.rekey(b, r)
		case "delete":
			w.orders.delete(b, r)
		}
	default:
		op := w.op(len(w.lines.keys))
		count(op)
		switch op {
		case "insert":
			k := w.newLine()
			w.lines.add(k)
			b.Queue(`INSERT INTO order_lines (order_id, line, sku, qty, price, attrs, data, tod)
				VALUES ($1, $2, $3::text::uuid, $4, $5, $6::text::jsonb, $7, $8::text::time)`, w.lineRow(k)...)
		case "update":
			k := w.lines.pick(r)
			v := w.lineRow(k)
			if r.IntN(2) == 0 {
				b.Queue(`UPDATE order_lines SET qty = qty + 1, price = $3 WHERE order_id = $1 AND line = $2`, v[0], v[1], v[4])
			} else {
				b.Queue(`UPDATE order_lines SET sku = $3::text::uuid, attrs = $4::text::jsonb, data = $5, tod = $6::text::time
					WHERE order_id = $1 AND line = $2`, v[0], v[1], v[2], v[5], v[6], v[7])
			}
		case "key":
			old := w.lines.pick(r)
			k := w.newLine()
			w.lines.remove(old)
			w.lines.add(k)
			b.Queue(`UPDATE order_lines SET order_id = $1, line = $2 WHERE order_id = $3 AND line = $4`,
				int32(k[0]), int16(k[1]), int32(old[0]), int16(old[1]))
		case "delete":
			k := w.lines.pick(r)
			w.lines.remove(k)
			b.Queue(`DELETE FROM order_lines WHERE order_id = $1 AND line = $2`, int32(k[0]), int16(k[1]))
		}
	}
}

// replColumn is a column the workload writes, with the cast its
// parameter needs (values of awkward types are sent as text).
type replColumn struct{ name, cast string }

var (
	customerCols = []replColumn{{"id", ""}, {"name", ""}, {"email", ""}, {"score", ""}, {"active", ""},
		{"created_at", "::text::timestamp"}, {"balance", "::text::numeric"}}
	orderCols = []replColumn{{"id", ""}, {"customer_id", ""}, {"status", ""}, {"total", "::text::numeric"},
		{"placed_at", "::text::timestamptz"}, {"ship_day", "::text::date"}, {"note", ""}}
)

// customerCols and orderCols are the columns of customerRow and orderRow,
// with the one each ALTER added once it ran.
func (w *replWorkload) customerCols() []replColumn {
	if w.altered > 0 {
		return append(customerCols[:len(customerCols):len(customerCols)], replColumn{"tier", ""})
	}
	return customerCols
}

func (w *replWorkload) orderCols() []replColumn {
	if w.altered > 1 {
		return append(orderCols[:len(orderCols):len(orderCols)], replColumn{"priority", ""})
	}
	return orderCols
}

// insertSQL inserts one row of cols, $1 … $n.
func insertSQL(table string, cols []replColumn) string {
	names, params := make([]string, len(cols)), make([]string, len(cols))
	for i, c := range cols {
		names[i], params[i] = c.name, fmt.Sprintf("$%d%s", i+1, c.cast)
	}
	return "INSERT INTO " + table + " (" + strings.Join(names, ", ") + ") VALUES (" + strings.Join(params, ", ") + ")"
}

// updateSQL sets every column but the first, the key ($1).
func updateSQL(table string, cols []replColumn) string {
	sets := make([]string, len(cols)-1)
	for i, c := range cols[1:] {
		sets[i] = fmt.Sprintf("%s = $%d%s", c.name, i+2, c.cast)
	}
	return "UPDATE " + table + " SET " + strings.Join(sets, ", ") + " WHERE " + cols[0].name + " = $1"
}

// newLine returns a free (order_id, line).
func (w *replWorkload) newLine() [2]int64 {
	for {
		o := 1 + w.rng.Int64N(2000)
		l := w.nextLine[o] + 1
		if l > 30000 {
			continue
		}
		w.nextLine[o] = l
		k := [2]int64{o, l}
		if !w.lines.has(k) {
			return k
		}
	}
}

// Texts with what a copy can get wrong: quotes, tabs, backslashes,
// non-ASCII.
var replTexts = []string{"plain", "it's", `say "hi"`, "tab\there", `back\slash`, "Zürich", "東京", "😀 emoji", ""}

func (w *replWorkload) text(prefix string) string {
	return fmt.Sprintf("%s %s %d", prefix, replTexts[w.rng.IntN(len(replTexts))], w.rng.IntN(1_000_000))
}

// maybe returns nil one time in n.
func (w *replWorkload) maybe(n int, v any) any {
	if w.rng.IntN(n) == 0 {
		return nil
	}
	return v
}

// customerRow: id, name, email, score, active, created_at, balance[, tier].
func (w *replWorkload) customerRow(id int64, tier bool) []any {
	r := w.rng
	created := time.Unix(946684800+r.Int64N(30*365*86400), 0).UTC().Format("2006-01-02 15:04:05")
	balance := fmt.Sprintf("%d.%02d", r.Int64N(2_000_000_000)-1_000_000_000, r.IntN(100))
	if balance[0] == '-' || r.IntN(2) == 0 {
		balance = fmt.Sprintf("%d.%02d", r.Int64N(1_000_000_000), r.IntN(100))
	}
	v := []any{id, w.text("name"), w.maybe(4, fmt.Sprintf("c%d@example.org", id)), w.maybe(5, r.NormFloat64()*1e6),
		r.IntN(3) > 0, created, w.maybe(6, balance)}
	if tier {
		v = append(v, w.maybe(3, []string{"gold", "silver", "bronze"}[r.IntN(3)]))
	}
	return v
}

// orderRow: id, customer_id, status, total, placed_at, ship_day, note[, priority].
func (w *replWorkload) orderRow(id int64, prio bool) []any {
	r := w.rng
	zone := time.FixedZone("", (r.IntN(27)-12)*3600)
	placed := time.UnixMicro(1_500_000_000_000_000 + r.Int64N(600_000_000_000_000)).In(zone).Format("2006-01-02 15:04:05.999999-07:00")
	total := fmt.Sprintf("%d.%04d", r.Int64N(10_000_000_000), r.IntN(10000))
	if r.IntN(5) == 0 {
		total = "-" + total
	}
	day := time.Unix(0, 0).UTC().AddDate(0, 0, 7000+r.IntN(30000)).Format(time.DateOnly)
	note := w.maybe(2, w.text("note"))
	if r.IntN(20) == 0 {
		// A value PostgreSQL stores out of line (TOAST): 8 kB of hex that
		// compresses to more than 2 kB.
		big := make([]byte, 4000)
		for i := range big {
			big[i] = byte(r.IntN(256))
		}
		note = hex.EncodeToString(big)
	}
	v := []any{int32(id), 1 + r.Int64N(1_000_000), []string{"new", "paid", "shipped", "cancelled"}[r.IntN(4)],
		w.maybe(5, total), placed, w.maybe(4, day), note}
	if prio {
		v = append(v, w.maybe(3, int16(r.IntN(10))))
	}
	return v
}

// lineRow: order_id, line, sku, qty, price, attrs, data, tod.
func (w *replWorkload) lineRow(k [2]int64) []any {
	r := w.rng
	var uuid [16]byte
	for i := range uuid {
		uuid[i] = byte(r.IntN(256))
	}
	sku := hex.EncodeToString(uuid[:])
	attrs, _ := json.Marshal(map[string]any{"color": replTexts[r.IntN(len(replTexts))], "size": r.IntN(50),
		"tags": []any{"a", r.IntN(9)}, "w": float64(r.IntN(10000)) / 100})
	data := make([]byte, r.IntN(25))
	for i := range data {
		data[i] = byte(r.IntN(256))
	}
	tod := time.UnixMilli(r.Int64N(86_400_000)).UTC().Format("15:04:05.000")
	return []any{int32(k[0]), int16(k[1]), sku, int32(r.IntN(1000)), w.maybe(5, float32(r.Float64()*1000)),
		w.maybe(4, string(attrs)), w.maybe(4, data), w.maybe(3, tod)}
}
