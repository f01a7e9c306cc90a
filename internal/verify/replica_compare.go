package verify

import (
	"sort"
	"strings"
)

// Kinds of row differences between a source table and its copy.
const (
	RowMissing   = "missing"   // a source row has no row of its key in the target
	RowExtra     = "extra"     // a target row has no row of its key in the source (or repeats a key)
	RowDifferent = "different" // the rows of a key differ in at least one compared column
)

// column is one compared column of a replica comparison.
type column struct {
	// Name is the column's name in both tables.
	Name string
	kind valueKind
	// digits are the fractional-second digits both sides keep (times).
	digits int
	// SourceType and TargetType are the databases' type names
	// (TargetType "" when the target lacks the column: compared as NULL).
	SourceType, TargetType string
}

// tableCompare compares the rows of one source table with its copy: the
// source's rows are added first (their key and checksum kept in memory),
// then the target's are matched against them. It is pure: readers feed it
// the text values the databases print, in column order.
type tableCompare struct {
	cols        []column
	keyIdx      []int
	maxExamples int

	h      rowHasher
	norm   []*string
	keyBuf []*string
	src    map[string]srcRow

	RowCounts

	// examples are the keys of the first differences of each kind, with
	// the target's values of extra and different rows.
	examples []RowDiff
	want     map[string]int // canonical key → index in examples (missing, different) awaiting source values
	perKind  map[string]int
}

// srcRow is what is kept of a source row.
type srcRow struct {
	sum  [16]byte
	seen bool
}

func newTableCompare(cols []column, keyIdx []int, maxExamples int) *tableCompare {
	if maxExamples <= 0 {
		maxExamples = 10
	}
	return &tableCompare{
		cols: cols, keyIdx: keyIdx, maxExamples: maxExamples,
		norm: make([]*string, len(cols)), keyBuf: make([]*string, len(keyIdx)),
		src: map[string]srcRow{}, want: map[string]int{}, perKind: map[string]int{},
	}
}

// normalize fills c.norm with the canonical values of raw and returns the
// row's canonical key.
func (c *tableCompare) normalize(raw []*string) string {
	for i, v := range raw {
		if v == nil {
			c.norm[i] = nil
			continue
		}
		n := normalizeValue(c.cols[i].kind, c.cols[i].digits, *v)
		c.norm[i] = &n
	}
	for i, k := range c.keyIdx {
		c.keyBuf[i] = c.norm[k]
	}
	return c.h.key(c.keyBuf)
}

// addSource adds a source row. A repeated key (impossible under a primary
// key) keeps the last row.
func (c *tableCompare) addSource(raw []*string) {
	c.SourceRows++
	k := c.normalize(raw)
	c.src[k] = srcRow{sum: c.h.sum(c.norm)}
}

// addTarget matches a target row with the source's row of its key.
func (c *tableCompare) addTarget(raw []*string) {
	c.TargetRows++
	k := c.normalize(raw)
	s, ok := c.src[k]
	switch {
	case !ok || s.seen:
		c.Extra++
		c.example(RowExtra, k, raw)
	case s.sum == c.h.sum(c.norm):
		c.src[k] = srcRow{sum: s.sum, seen: true}
		c.Equal++
	default:
		c.src[k] = srcRow{sum: s.sum, seen: true}
		c.Different++
		c.example(RowDifferent, k, raw)
	}
}

// finish counts the source rows no target row matched. It returns the
// canonical keys whose source values the examples still need (missing
// and different rows), for a second read of the source.
func (c *tableCompare) finish() map[string]bool {
	var missing []string
	for k, s := range c.src {
		if !s.seen {
			c.Missing++
			missing = append(missing, k)
		}
	}
	sort.Strings(missing) // examples in a stable order
	for _, k := range missing {
		c.example(RowMissing, k, nil)
	}
	need := map[string]bool{}
	for k := range c.want {
		need[k] = true
	}
	return need
}

// example records a difference while fewer than maxExamples of its kind
// are kept.
func (c *tableCompare) example(kind, key string, target []*string) {
	if c.perKind[kind] >= c.maxExamples {
		return
	}
	c.perKind[kind]++
	d := RowDiff{Kind: kind}
	if target != nil {
		d.target = append([]*string(nil), target...)
		d.Key = c.describeKey(target)
	}
	c.examples = append(c.examples, d)
	if kind != RowExtra {
		c.want[key] = len(c.examples) - 1
	}
}

// addSourceExample gives an awaited example its source row (from the
// second read of the source).
func (c *tableCompare) addSourceExample(raw []*string) {
	k := c.normalize(raw)
	i, ok := c.want[k]
	if !ok {
		return
	}
	delete(c.want, k)
	c.examples[i].source = append([]*string(nil), raw...)
	if c.examples[i].Key == "" {
		c.examples[i].Key = c.describeKey(raw)
	}
}

// describeKey writes a row's key as "a=1, b=x".
func (c *tableCompare) describeKey(raw []*string) string {
	parts := make([]string, len(c.keyIdx))
	for i, k := range c.keyIdx {
		parts[i] = c.cols[k].Name + "=" + showValue(raw[k])
	}
	return strings.Join(parts, ", ")
}

// diffs finishes the examples: a different row lists the columns whose
// normalised values differ, a missing row the source's values, an extra
// row the target's.
func (c *tableCompare) diffs() []RowDiff {
	out := make([]RowDiff, 0, len(c.examples))
	for _, d := range c.examples {
		switch d.Kind {
		case RowDifferent:
			for i, col := range c.cols {
				var s, t *string
				if d.source != nil {
					s = d.source[i]
				}
				t = d.target[i]
				if !sameNormalized(col, s, t) {
					d.Columns = append(d.Columns, ColumnDiff{Column: col.Name, Source: s, Target: t})
				}
			}
		case RowMissing:
			for i, col := range c.cols {
				if d.source != nil {
					d.Columns = append(d.Columns, ColumnDiff{Column: col.Name, Source: d.source[i]})
				}
			}
		case RowExtra:
			for i, col := range c.cols {
				d.Columns = append(d.Columns, ColumnDiff{Column: col.Name, Target: d.target[i]})
			}
		}
		out = append(out, d)
	}
	return out
}

// sameNormalized reports whether two raw values of col are equal once
// normalised.
func sameNormalized(col column, a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return normalizeValue(col.kind, col.digits, *a) == normalizeValue(col.kind, col.digits, *b)
}

// showValue writes a value for a message: NULL, or the text as printed
// (long values cut).
func showValue(v *string) string {
	if v == nil {
		return "NULL"
	}
	s := *v
	if len(s) > 80 {
		s = s[:77] + "…"
	}
	return s
}

// RowDiff is one example of a difference.
type RowDiff struct {
	// Kind is RowMissing, RowExtra or RowDifferent.
	Kind string `json:"kind"`
	// Key is the row's key, "a=1, b=x".
	Key string `json:"key"`
	// Columns: for a different row the columns that differ; for a missing
	// row the source's values; for an extra row the target's.
	Columns []ColumnDiff `json:"columns,omitempty"`

	source, target []*string
}

// ColumnDiff is a column's value on each side, as its database prints it
// (nil: NULL, or not that side's row).
type ColumnDiff struct {
	Column string  `json:"column"`
	Source *string `json:"source"`
	Target *string `json:"target"`
}
