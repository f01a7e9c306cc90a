package clickhouse

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/txsink/txsink/twophase"
)

func TestRoundToken(t *testing.T) {
	id := func(p int32, first int64) twophase.BatchID {
		return twophase.BatchID{Connector: "c", Topic: "t", Partition: p, First: first, Last: first + 9}
	}
	a, b, c := id(0, 0), id(1, 0), id(2, 10)
	if got := RoundToken([]twophase.BatchID{a}); got != Token(a) {
		t.Fatalf("round of one: %q, want the batch's own token %q", got, Token(a))
	}
	tok := RoundToken([]twophase.BatchID{a, b, c})
	if tok != RoundToken([]twophase.BatchID{c, a, b}) {
		t.Error("the token depends on the order the batches came in")
	}
	if !strings.HasPrefix(tok, "txsink2-3-") || roundSize(tok) != 3 {
		t.Errorf("token %q: size %d, want the prefix txsink2-3- and size 3", tok, roundSize(tok))
	}
	if roundSize(Token(a)) != 1 {
		t.Errorf("size of a batch token %d", roundSize(Token(a)))
	}
	seen := map[string]bool{tok: true}
	for _, other := range [][]twophase.BatchID{{a, b}, {a, c}, {a, b, id(2, 11)}, {a, b, id(3, 10)}, {a, b, c, id(3, 0)}} {
		if o := RoundToken(other); seen[o] {
			t.Errorf("%v: token collides", other)
		} else {
			seen[o] = true
		}
	}
}

// part is a batch's mapped rows: for each table, n rows with the given
// column list, offsets from first.
func part(first int64, tables map[string]int, cols string) *prepared {
	p := &prepared{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range tables {
			if !yield(k) {
				return
			}
		}
	}) {
		g := &rowGroup{t: &table{Name: name, Ident: "`" + name + "`"}}
		for _, c := range strings.Split(cols, ",") {
			g.cols = append(g.cols, &column{Name: c})
		}
		for i := range tables[name] {
			g.rows = append(g.rows, []any{fmt.Sprintf("%s@%d", name, first+int64(i))})
			g.offs = append(g.offs, first+int64(i))
		}
		p.groups = append(p.groups, g)
	}
	return p
}

// TestMergeOneBlockPerTable: the batches of a round go into one block per
// table and column list, rows in member order, with the spans that say
// which partition each run of rows came from; a smaller block size cuts
// the same rows at the same places, spans cut with them.
func TestMergeOneBlockPerTable(t *testing.T) {
	ids := []twophase.BatchID{
		{Connector: "c", Topic: "t", Partition: 0, First: 0, Last: 2},
		{Connector: "c", Topic: "t", Partition: 1, First: 100, Last: 103},
		{Connector: "c", Topic: "u", Partition: 0, First: 7, Last: 8},
	}
	parts := []*prepared{
		part(0, map[string]int{"a": 3, "b": 1}, "x"),
		part(100, map[string]int{"a": 4}, "x"),
		part(7, map[string]int{"a": 1}, "x"),
	}
	// and table b with another column list
	parts[2].groups = append(parts[2].groups, part(7, map[string]int{"b": 2}, "x,y").groups...)
	parts[1].dlq = &block{Rows: [][]any{{"bad"}}, Offsets: []int64{104}}
	p := merge(ids, parts, 1000)
	type want struct {
		table string
		rows  int
		spans []span
	}
	var got []want
	for _, b := range p.blocks {
		got = append(got, want{b.T.Name, len(b.Rows), b.Spans})
	}
	exp := []want{
		{"a", 8, []span{{"t", 0, 3}, {"t", 1, 4}, {"u", 0, 1}}},
		{"b", 1, []span{{"t", 0, 1}}},
		{"b", 2, []span{{"u", 0, 2}}},
	}
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Fatalf("blocks %v, want %v", got, exp)
	}
	if first := p.blocks[0].Rows; first[0][0] != "a@0" || first[3][0] != "a@100" || first[7][0] != "a@7" {
		t.Errorf("rows of table a not in member order: %v", first)
	}
	if p.dlq == nil || len(p.dlq.Rows) != 1 || fmt.Sprint(p.dlq.Spans) != fmt.Sprint([]span{{"t", 1, 1}}) {
		t.Errorf("dead letters %+v", p.dlq)
	}
	if p.nblocks() != 4 {
		t.Errorf("nblocks %d, want 3 blocks and the dead letters", p.nblocks())
	}

	small := merge(ids, parts, 3)
	var rows []any
	for _, b := range small.blocks {
		n := 0
		for _, sp := range b.Spans {
			n += sp.n
		}
		if n != len(b.Rows) || len(b.Rows) > 3 {
			t.Errorf("block of %d rows, spans %v", len(b.Rows), b.Spans)
		}
		if b.T.Name == "a" {
			for _, r := range b.Rows {
				rows = append(rows, r[0])
			}
		}
	}
	if fmt.Sprint(rows) != fmt.Sprint(slices.Collect(func(yield func(any) bool) {
		for _, r := range p.blocks[0].Rows {
			yield(r[0])
		}
	})) {
		t.Errorf("cut into blocks of 3, table a's rows are %v", rows)
	}
	if fmt.Sprint(small.blocks[1].Spans) != fmt.Sprint([]span{{"t", 1, 3}}) || fmt.Sprint(small.blocks[2].Spans) != fmt.Sprint([]span{{"t", 1, 1}, {"u", 0, 1}}) {
		t.Errorf("spans of the cut blocks: %v, %v", small.blocks[1].Spans, small.blocks[2].Spans)
	}

	if one := merge(ids[:1], parts[:1], 1000); one != parts[0] {
		t.Error("a round of one is not the batch's own layout")
	}
}

func TestBlockRuns(t *testing.T) {
	id := twophase.BatchID{Topic: "t", Partition: 4}
	own := &block{Offsets: []int64{1, 2, 3}}
	if got := own.runs(id); len(got) != 1 || got[0].key != (partKey{"t", 4}) || len(got[0].offs) != 3 {
		t.Errorf("runs of a batch's own block: %v", got)
	}
	b := &block{Offsets: []int64{5, 6, 1, 9}, Spans: []span{{"t", 0, 2}, {"t", 1, 1}, {"u", 0, 1}}}
	got := b.runs(id)
	if fmt.Sprint(got) != fmt.Sprint([]run{{partKey{"t", 0}, []int64{5, 6}}, {partKey{"t", 1}, []int64{1}}, {partKey{"u", 0}, []int64{9}}}) {
		t.Errorf("runs %v", got)
	}
}

func TestNextAttempt(t *testing.T) {
	in := intent{Fence: 5}
	if err := nextAttempt(&in, []intent{{Fence: 4, Status: statusAborted, Attempt: 3}, {Fence: 5, Status: statusAborted, Attempt: 1}}); err != nil || in.Attempt != 2 {
		t.Fatalf("after an aborted attempt 1: attempt %d, err %v", in.Attempt, err)
	}
	in = intent{Fence: 5}
	if err := nextAttempt(&in, []intent{{Fence: 5, Status: statusPending, Attempt: 2}}); err != nil || in.Attempt != 2 {
		t.Fatalf("repeated before a decision: attempt %d, err %v", in.Attempt, err)
	}
	in = intent{Fence: 5}
	if err := nextAttempt(&in, []intent{{Fence: 5, Status: statusAborted, Attempt: maxAttempt}}); err == nil {
		t.Fatal("no room for another attempt, and no error")
	}
}
