package verify

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"
)

// Kind names an anomaly.
type Kind string

// Sink faults: any of them makes a check fail.
const (
	Loss            Kind = "loss"              // committed record below next_offset with no row (and no dead letter)
	Duplicate       Kind = "duplicate"         // more than one row with the same coordinates
	DuplicateID     Kind = "duplicate_id"      // a payload id in more rows (at distinct coordinates) than committed records carry it
	AbortedRead     Kind = "aborted_read"      // a row whose coordinates are not a committed record
	ValueMismatch   Kind = "value_mismatch"    // a row whose payload id or compared columns differ from its record
	BeyondOffset    Kind = "beyond_offset"     // a row at or past the stored next_offset
	OffsetAhead     Kind = "offset_ahead"      // stored next_offset past the topic's last stable offset
	OffsetBackwards Kind = "offset_backwards"  // next_offset decreased between two samples of the history
	PreparedLeft    Kind = "prepared_leftover" // a prepared transaction of the connector older than the grace period
	IntentLeft      Kind = "intent_leftover"   // an unfinished intent of a ClickHouse connector older than the grace period
	LagExceeded     Kind = "lag"               // more undelivered committed records than Config.MaxLag
)

// Upstream anomalies: faults of the broker or the producer, reported apart.
const (
	UpstreamLost           Kind = "upstream_lost"            // an acknowledged record is not in the read_committed log
	UpstreamAbortedVisible Kind = "upstream_aborted_visible" // a record of a failed transaction is in the read_committed log
	UpstreamOffsetMismatch Kind = "upstream_offset_mismatch" // the log holds another payload at the offset the producer was acknowledged
	UpstreamLostSunk       Kind = "upstream_lost_sunk"       // the sink holds an acknowledged record that the log no longer has
)

// SinkKinds and UpstreamKinds list the kinds in report order.
var (
	SinkKinds     = []Kind{Loss, Duplicate, DuplicateID, AbortedRead, ValueMismatch, BeyondOffset, OffsetAhead, OffsetBackwards, PreparedLeft, IntentLeft, LagExceeded}
	UpstreamKinds = []Kind{UpstreamLost, UpstreamAbortedVisible, UpstreamOffsetMismatch, UpstreamLostSunk}
)

// IsSinkFault reports whether k is a fault of the sink (as opposed to an
// upstream anomaly).
func (k Kind) IsSinkFault() bool {
	for _, s := range SinkKinds {
		if k == s {
			return true
		}
	}
	return false
}

// Record is one committed record of the ground truth.
type Record struct {
	Offset int64
	// ID is the payload id extracted from the record ("" when the record
	// has none).
	ID string
	// Fields are the values of Config.CompareColumns extracted from the
	// record, normalised (see normalize); nil entries are absent fields.
	Fields []*string
}

// PartitionTruth is the read_committed scan of one partition.
type PartitionTruth struct {
	Topic     string
	Partition int32
	// LogStart is the log start offset; StableEnd the last stable offset
	// (the end of the committed log when the scan started); HighWatermark
	// the end of the log.
	LogStart, StableEnd, HighWatermark int64
	// Records are the committed records in [LogStart, StableEnd), in
	// offset order.
	Records []Record
	// Incomplete is set when the scan stopped before StableEnd (it waited
	// Config.ScanIdle without progress); ScannedTo is one past the last
	// offset it saw.
	Incomplete bool
	ScannedTo  int64
}

// Row is one sink row that names a Kafka record.
type Row struct {
	Offset int64
	// ID is the row's payload id; HasID is false when the id column is not
	// configured or NULL.
	ID     string
	HasID  bool
	Fields []*string
}

// PartitionSink is what the sink holds for one partition.
type PartitionSink struct {
	Topic     string
	Partition int32
	// Next is the stored next_offset, or -1 when there is no offsets row or
	// it is NULL; Fence the stored fence.
	Next, Fence int64
	HasOffsets  bool
	Rows        []Row
	// DeadLetters are offsets written to the dead-letter table.
	DeadLetters []int64
}

// Prepared is a prepared transaction found in pg_prepared_xacts, or (Intent)
// an unfinished batch intent of a ClickHouse sink: a batch with a pending
// intent and no done one.
type Prepared struct {
	GID      string        `json:"gid"`
	Owner    string        `json:"owner"`
	Database string        `json:"database"`
	Age      time.Duration `json:"age_ns"`
	// Ours is true when the gid carries the audited connector's prefix
	// (always for intents).
	Ours bool `json:"ours"`
	// Intent marks a ClickHouse intent; GID then describes it
	// ("intent topic[partition] first..last fence N").
	Intent bool `json:"intent,omitempty"`
}

// OffsetSample is a stored offset seen at some moment (the chaos runner
// samples them while it injects faults).
type OffsetSample struct {
	At        time.Time `json:"at"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Next      int64     `json:"next_offset"`
	Fence     int64     `json:"fence"`
}

// Input is everything Analyze compares.
type Input struct {
	Connector string
	Truth     []PartitionTruth
	Sink      []PartitionSink
	Prepared  []Prepared
	// ProducerLog is optional.
	ProducerLog []Txn
	// History is optional: stored offsets sampled over time.
	History []OffsetSample
	// PreparedGrace: prepared transactions of the connector younger than
	// this are in flight, not leftovers.
	PreparedGrace time.Duration
	// CheckLag makes more than MaxLag undelivered committed records in a
	// partition a fault.
	CheckLag bool
	MaxLag   int64
	// FromFirstRow starts the loss check of each partition at its first
	// row instead of the log start (for connectors started with
	// offsets.initial=latest).
	FromFirstRow bool
	// MaxExamples bounds the anomalies listed per kind (counts stay
	// exact); 0 means 100.
	MaxExamples int
}

// Anomaly is one finding.
type Anomaly struct {
	Kind      Kind   `json:"kind"`
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	ID        string `json:"id,omitempty"`
	Detail    string `json:"detail"`
}

// PartitionReport is the result for one partition.
type PartitionReport struct {
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	LogStart      int64  `json:"log_start"`
	StableEnd     int64  `json:"stable_end"`
	HighWatermark int64  `json:"high_watermark"`
	Committed     int    `json:"committed_records"`
	Rows          int    `json:"rows"`
	DeadLetters   int    `json:"dead_letters"`
	// NextOffset is the stored next_offset (-1: none).
	NextOffset int64 `json:"next_offset"`
	Fence      int64 `json:"fence"`
	// Lag is the number of committed records at or past NextOffset.
	Lag int64 `json:"lag"`
	// Unverifiable counts rows below the log start (deleted by
	// retention: nothing to compare them with).
	Unverifiable int          `json:"unverifiable_rows"`
	Incomplete   bool         `json:"scan_incomplete,omitempty"`
	Counts       map[Kind]int `json:"anomalies"`
}

// UpstreamSummary sums up the producer log.
type UpstreamSummary struct {
	Transactions     int `json:"transactions"`
	Acknowledged     int `json:"acknowledged"`
	Failed           int `json:"failed"`
	Unknown          int `json:"unknown"`
	UnknownCommitted int `json:"unknown_committed"`
	UnknownAborted   int `json:"unknown_aborted"`
	Records          int `json:"records"`
}

// Report is the result of a check.
type Report struct {
	Connector string `json:"connector"`
	// Sink is "postgres" or "clickhouse" (set by Check).
	Sink       string             `json:"sink,omitempty"`
	CheckedAt  time.Time          `json:"checked_at"`
	Partitions []*PartitionReport `json:"partitions"`
	// Counts per kind over all partitions (sink faults and upstream
	// anomalies).
	Counts map[Kind]int `json:"anomalies"`
	// SinkFaults and UpstreamAnomalies are the totals of each class.
	SinkFaults        int `json:"sink_faults"`
	UpstreamAnomalies int `json:"upstream_anomalies"`
	// Committed, Rows and Lag are totals over the partitions.
	Committed int   `json:"committed_records"`
	Rows      int   `json:"rows"`
	Lag       int64 `json:"lag"`
	// Examples lists anomalies, at most MaxExamples per kind.
	Examples []Anomaly         `json:"examples"`
	Prepared []Prepared        `json:"prepared_transactions"`
	Upstream *UpstreamSummary  `json:"upstream,omitempty"`
	Notes    []string          `json:"notes,omitempty"`
	Config   map[string]string `json:"config,omitempty"`
}

// OK reports whether the check found no sink fault.
func (r *Report) OK() bool { return r.SinkFaults == 0 }

type tp struct {
	topic string
	part  int32
}

type reporter struct {
	r        *Report
	max      int
	examples map[Kind]int
	parts    map[tp]*PartitionReport
}

func (rp *reporter) add(a Anomaly) {
	rp.r.Counts[a.Kind]++
	if a.Kind.IsSinkFault() {
		rp.r.SinkFaults++
	} else {
		rp.r.UpstreamAnomalies++
	}
	if pr := rp.parts[tp{a.Topic, a.Partition}]; pr != nil {
		pr.Counts[a.Kind]++
	}
	if rp.examples[a.Kind] < rp.max {
		rp.examples[a.Kind]++
		rp.r.Examples = append(rp.r.Examples, a)
	}
}

// Analyze compares the two sides and returns the report. It does no I/O.
func Analyze(in Input) *Report {
	r := &Report{Connector: in.Connector, CheckedAt: time.Now().UTC(), Counts: map[Kind]int{}}
	rp := &reporter{r: r, max: in.MaxExamples, examples: map[Kind]int{}, parts: map[tp]*PartitionReport{}}
	if rp.max <= 0 {
		rp.max = 100
	}

	truth := map[tp]*PartitionTruth{}
	for i := range in.Truth {
		t := &in.Truth[i]
		truth[tp{t.Topic, t.Partition}] = t
	}
	sink := map[tp]*PartitionSink{}
	for i := range in.Sink {
		s := &in.Sink[i]
		sink[tp{s.Topic, s.Partition}] = s
	}
	var keys []tp
	for k := range truth {
		keys = append(keys, k)
	}
	for k := range sink {
		if truth[k] == nil {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].part < keys[j].part
	})
	for _, k := range keys {
		pr := &PartitionReport{Topic: k.topic, Partition: k.part, NextOffset: -1, Counts: map[Kind]int{}}
		r.Partitions = append(r.Partitions, pr)
		rp.parts[k] = pr
	}

	up := indexProducerLog(in.ProducerLog)

	// Per topic: payload id -> number of committed records carrying it,
	// and -> distinct sink coordinates holding it.
	type idCount struct {
		truth int
		coord map[tp]map[int64]bool
	}
	ids := map[string]map[string]*idCount{}
	idOf := func(topic, id string) *idCount {
		m := ids[topic]
		if m == nil {
			m = map[string]*idCount{}
			ids[topic] = m
		}
		c := m[id]
		if c == nil {
			c = &idCount{}
			m[id] = c
		}
		return c
	}

	for _, k := range keys {
		pr := rp.parts[k]
		t := truth[k]
		s := sink[k]
		if t == nil {
			t = &PartitionTruth{Topic: k.topic, Partition: k.part}
			r.Notes = append(r.Notes, fmt.Sprintf("%s[%d]: the sink has data for a partition the topic does not have", k.topic, k.part))
		}
		if s == nil {
			s = &PartitionSink{Topic: k.topic, Partition: k.part, Next: -1}
		}
		pr.LogStart, pr.StableEnd, pr.HighWatermark = t.LogStart, t.StableEnd, t.HighWatermark
		pr.Committed, pr.Rows, pr.DeadLetters = len(t.Records), len(s.Rows), len(s.DeadLetters)
		pr.NextOffset, pr.Fence, pr.Incomplete = s.Next, s.Fence, t.Incomplete
		if t.Incomplete {
			r.Notes = append(r.Notes, fmt.Sprintf("%s[%d]: the scan stopped at offset %d before the stable end %d (no progress); records past it are treated as not committed", k.topic, k.part, t.ScannedTo, t.StableEnd))
		}
		for _, rec := range t.Records {
			if rec.ID != "" {
				idOf(k.topic, rec.ID).truth++
			}
		}
		analyzePartition(rp, pr, t, s, up, in, func(id string, off int64) {
			c := idOf(k.topic, id)
			if c.coord == nil {
				c.coord = map[tp]map[int64]bool{}
			}
			if c.coord[k] == nil {
				c.coord[k] = map[int64]bool{}
			}
			c.coord[k][off] = true
		})
		r.Committed += pr.Committed
		r.Rows += pr.Rows
		r.Lag += pr.Lag
	}

	// Duplicates by payload id: more distinct coordinates hold an id than
	// committed records carry it.
	var topics []string
	for topic := range ids {
		topics = append(topics, topic)
	}
	sort.Strings(topics)
	for _, topic := range topics {
		var idList []string
		for id := range ids[topic] {
			idList = append(idList, id)
		}
		sort.Strings(idList)
		for _, id := range idList {
			c := ids[topic][id]
			n := 0
			var where []string
			var first tp
			var firstOff int64 = math.MaxInt64
			for k, offs := range c.coord {
				n += len(offs)
				for off := range offs {
					where = append(where, fmt.Sprintf("%d@%d", k.part, off))
					if off < firstOff {
						first, firstOff = k, off
					}
				}
			}
			if n > c.truth && n > 1 {
				sort.Strings(where)
				rp.add(Anomaly{Kind: DuplicateID, Topic: topic, Partition: first.part, Offset: firstOff, ID: id,
					Detail: fmt.Sprintf("payload id in rows at %d coordinates (%v), carried by %d committed records", n, where, c.truth)})
			}
		}
	}

	analyzeHistory(rp, in.History, sink)
	analyzePrepared(rp, in)
	analyzeUpstream(rp, up, truth, in)
	return r
}

// analyzePartition checks one partition's rows and offsets against its
// committed records. seen is called for every row with a payload id.
func analyzePartition(rp *reporter, pr *PartitionReport, t *PartitionTruth, s *PartitionSink, up *upIndex, in Input, seen func(id string, off int64)) {
	rows := append([]Row(nil), s.Rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Offset < rows[j].Offset })
	next := s.Next
	recAt := func(off int64) *Record {
		i := sort.Search(len(t.Records), func(i int) bool { return t.Records[i].Offset >= off })
		if i < len(t.Records) && t.Records[i].Offset == off {
			return &t.Records[i]
		}
		return nil
	}
	loc := func(kind Kind, off int64, id, detail string) Anomaly {
		return Anomaly{Kind: kind, Topic: t.Topic, Partition: t.Partition, Offset: off, ID: id, Detail: detail}
	}
	have := map[int64]bool{}
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].Offset == rows[i].Offset {
			j++
		}
		off := rows[i].Offset
		have[off] = true
		row := rows[i]
		for _, rw := range rows[i:j] {
			if rw.HasID {
				seen(rw.ID, off)
			}
		}
		if n := j - i; n > 1 {
			rp.add(loc(Duplicate, off, row.ID, fmt.Sprintf("%d rows with these coordinates", n)))
		}
		i = j
		if off < t.LogStart {
			pr.Unverifiable++
			continue
		}
		rec := recAt(off)
		if rec == nil {
			if row.HasID {
				if txn, ok := up.acked[upKey{t.Topic, row.ID}]; ok {
					rp.add(loc(UpstreamLostSunk, off, row.ID, fmt.Sprintf("the row holds a record of acknowledged transaction %s that the read_committed log does not have at this offset", txn)))
					continue
				}
			}
			detail := fmt.Sprintf("offset %d is not a committed record (an aborted record, a transaction marker, or past the stable end %d)", off, t.StableEnd)
			if row.HasID {
				if txn, ok := up.failed[upKey{t.Topic, row.ID}]; ok {
					detail = fmt.Sprintf("the row holds a record of failed (aborted) transaction %s", txn)
				}
			}
			rp.add(loc(AbortedRead, off, row.ID, detail))
			continue
		}
		if row.HasID && rec.ID != "" && row.ID != rec.ID {
			rp.add(loc(ValueMismatch, off, row.ID, fmt.Sprintf("row payload id %q, record payload id %q", row.ID, rec.ID)))
		} else if k := mismatchedField(row.Fields, rec.Fields); k >= 0 {
			rp.add(loc(ValueMismatch, off, row.ID, fmt.Sprintf("compared column #%d: row %s, record %s", k+1, show(row.Fields[k]), show(rec.Fields[k]))))
		}
		if next < 0 || off >= next {
			rp.add(loc(BeyondOffset, off, row.ID, fmt.Sprintf("row at offset %d but the stored next_offset is %d", off, next)))
		}
	}
	for _, off := range s.DeadLetters {
		have[off] = true
	}

	from := t.LogStart
	if in.FromFirstRow && len(rows) > 0 && rows[0].Offset > from {
		from = rows[0].Offset
	}
	for _, rec := range t.Records {
		if next >= 0 && rec.Offset < next {
			if rec.Offset >= from && !have[rec.Offset] {
				rp.add(loc(Loss, rec.Offset, rec.ID, fmt.Sprintf("committed record below the stored next_offset %d has no row", next)))
			}
			continue
		}
		pr.Lag++
	}
	if next >= 0 && next > t.StableEnd && !t.Incomplete {
		rp.add(loc(OffsetAhead, next, "", fmt.Sprintf("stored next_offset %d is past the last stable offset %d", next, t.StableEnd)))
	}
	if in.CheckLag && pr.Lag > in.MaxLag {
		rp.add(loc(LagExceeded, next, "", fmt.Sprintf("%d committed records not delivered (limit %d)", pr.Lag, in.MaxLag)))
	}
}

func mismatchedField(row, rec []*string) int {
	for k := range row {
		if k >= len(rec) {
			break
		}
		a, b := row[k], rec[k]
		if a == nil && b == nil {
			continue
		}
		if a == nil || b == nil || !sameValue(*a, *b) {
			return k
		}
	}
	return -1
}

// sameValue compares two normalised values; numbers compare numerically.
func sameValue(a, b string) bool {
	if a == b {
		return true
	}
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x == y
}

func show(s *string) string {
	if s == nil {
		return "NULL"
	}
	return strconv.Quote(*s)
}

func analyzeHistory(rp *reporter, hist []OffsetSample, sink map[tp]*PartitionSink) {
	if len(hist) == 0 {
		return
	}
	byTP := map[tp][]OffsetSample{}
	for _, h := range hist {
		k := tp{h.Topic, h.Partition}
		byTP[k] = append(byTP[k], h)
	}
	var keys []tp
	for k := range byTP {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].part < keys[j].part
	})
	for _, k := range keys {
		hs := byTP[k]
		sort.SliceStable(hs, func(i, j int) bool { return hs[i].At.Before(hs[j].At) })
		if s := sink[k]; s != nil && s.Next >= 0 {
			hs = append(hs, OffsetSample{At: time.Now(), Topic: k.topic, Partition: k.part, Next: s.Next, Fence: s.Fence})
		}
		var prev *OffsetSample
		for i := range hs {
			h := &hs[i]
			if h.Next < 0 {
				continue
			}
			if prev != nil && h.Next < prev.Next {
				if _, ok := rp.parts[k]; !ok {
					pr := &PartitionReport{Topic: k.topic, Partition: k.part, NextOffset: -1, Counts: map[Kind]int{}}
					rp.r.Partitions = append(rp.r.Partitions, pr)
					rp.parts[k] = pr
				}
				rp.add(Anomaly{Kind: OffsetBackwards, Topic: k.topic, Partition: k.part, Offset: h.Next,
					Detail: fmt.Sprintf("next_offset went from %d (fence %d, %s) back to %d (fence %d, %s)", prev.Next, prev.Fence, prev.At.UTC().Format(time.RFC3339Nano), h.Next, h.Fence, h.At.UTC().Format(time.RFC3339Nano))})
			}
			prev = h
		}
	}
}

func analyzePrepared(rp *reporter, in Input) {
	for _, p := range in.Prepared {
		rp.r.Prepared = append(rp.r.Prepared, p)
		if !p.Ours {
			rp.r.Notes = append(rp.r.Notes, fmt.Sprintf("prepared transaction %s (database %s) is txsink's but not this connector's", p.GID, p.Database))
			continue
		}
		what, kind := "prepared transaction", PreparedLeft
		if p.Intent {
			what, kind = "unfinished", IntentLeft
		}
		if p.Age < in.PreparedGrace {
			rp.r.Notes = append(rp.r.Notes, fmt.Sprintf("%s %s is %v old: in flight (grace %v)", what, p.GID, p.Age.Round(time.Millisecond), in.PreparedGrace))
			continue
		}
		rp.add(Anomaly{Kind: kind, Partition: -1, Offset: -1, Detail: fmt.Sprintf("%s %s left for %v", what, p.GID, p.Age.Round(time.Millisecond))})
	}
}
