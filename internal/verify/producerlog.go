package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"
)

// Outcomes of an upstream transaction, as its producer saw them.
const (
	// OutcomeAcknowledged: the commit returned success; every record must
	// be in the read_committed log.
	OutcomeAcknowledged = "acknowledged"
	// OutcomeFailed: the transaction was aborted, or never asked to commit
	// (for example its producer died mid-transaction); no record may be
	// visible.
	OutcomeFailed = "failed"
	// OutcomeUnknown: the commit's result was not seen (timeout, broker
	// gone); either is allowed, and the check reports which happened.
	OutcomeUnknown = "unknown"
)

// Txn is one line of a producer log: a transaction and its records.
//
//	{"txn":"p0-17","outcome":"acknowledged","records":[{"topic":"t","partition":2,"offset":1041,"id":"p0-17-3"}]}
//
// Offset is -1 when the producer never learned it; records are then
// matched by payload id alone.
type Txn struct {
	ID      string     `json:"txn"`
	Outcome string     `json:"outcome"`
	At      time.Time  `json:"at,omitzero"`
	Records []TxnEntry `json:"records"`
}

// TxnEntry is one record of a logged transaction.
type TxnEntry struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	ID        string `json:"id"`
}

// ReadProducerLog parses a producer log (JSON lines; blank lines are
// skipped).
func ReadProducerLog(r io.Reader) ([]Txn, error) {
	var out []Txn
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		var t Txn
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("producer log line %d: %w", line, err)
		}
		switch t.Outcome {
		case OutcomeAcknowledged, OutcomeFailed, OutcomeUnknown:
		default:
			return nil, fmt.Errorf("producer log line %d: outcome must be %s, %s or %s, got %q", line, OutcomeAcknowledged, OutcomeFailed, OutcomeUnknown, t.Outcome)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("producer log: %w", err)
	}
	return out, nil
}

// ReadProducerLogFile reads a producer log file.
func ReadProducerLogFile(path string) ([]Txn, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadProducerLog(f)
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// LogWriter appends transactions to a producer log. It is safe for
// concurrent use.
type LogWriter struct {
	mu  sync.Mutex
	w   io.Writer
	enc *json.Encoder
}

// NewLogWriter writes JSON lines to w.
func NewLogWriter(w io.Writer) *LogWriter {
	return &LogWriter{w: w, enc: json.NewEncoder(w)}
}

// Write appends one transaction.
func (l *LogWriter) Write(t Txn) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.enc.Encode(t)
}

// ReadHistory parses an offset history: JSON lines of OffsetSample.
func ReadHistory(r io.Reader) ([]OffsetSample, error) {
	var out []OffsetSample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(trimSpace(sc.Bytes())) == 0 {
			continue
		}
		var s OffsetSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("offset history line %d: %w", line, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

type upKey struct{ topic, id string }

// upIndex maps payload ids of the producer log to their transactions.
type upIndex struct {
	txns   []Txn
	acked  map[upKey]string
	failed map[upKey]string
}

func indexProducerLog(txns []Txn) *upIndex {
	u := &upIndex{txns: txns, acked: map[upKey]string{}, failed: map[upKey]string{}}
	for _, t := range txns {
		for _, e := range t.Records {
			if e.ID == "" {
				continue
			}
			switch t.Outcome {
			case OutcomeAcknowledged:
				u.acked[upKey{e.Topic, e.ID}] = t.ID
			case OutcomeFailed:
				u.failed[upKey{e.Topic, e.ID}] = t.ID
			}
		}
	}
	return u
}

func analyzeUpstream(rp *reporter, up *upIndex, truth map[tp]*PartitionTruth, in Input) {
	if len(up.txns) == 0 {
		return
	}
	sum := &UpstreamSummary{}
	rp.r.Upstream = sum
	// Payload ids present in the committed log, per topic.
	present := map[upKey]bool{}
	for _, t := range truth {
		for _, r := range t.Records {
			if r.ID != "" {
				present[upKey{t.Topic, r.ID}] = true
			}
		}
	}
	audited := map[string]bool{}
	for k := range truth {
		audited[k.topic] = true
	}
	notStable := 0
	for _, t := range up.txns {
		sum.Transactions++
		switch t.Outcome {
		case OutcomeAcknowledged:
			sum.Acknowledged++
		case OutcomeFailed:
			sum.Failed++
		case OutcomeUnknown:
			sum.Unknown++
		}
		visible := false
		for _, e := range t.Records {
			if !audited[e.Topic] {
				continue
			}
			sum.Records++
			pt := truth[tp{e.Topic, e.Partition}]
			if pt == nil {
				rp.r.Notes = append(rp.r.Notes, fmt.Sprintf("producer log names %s[%d], which the topic does not have", e.Topic, e.Partition))
				continue
			}
			if e.Offset >= 0 && e.Offset < pt.LogStart {
				continue // deleted by retention
			}
			end := pt.StableEnd
			if pt.Incomplete {
				end = pt.ScannedTo
			}
			if e.Offset >= end {
				notStable++
				continue
			}
			var at *Record
			if e.Offset >= 0 {
				i := sort.Search(len(pt.Records), func(i int) bool { return pt.Records[i].Offset >= e.Offset })
				if i < len(pt.Records) && pt.Records[i].Offset == e.Offset {
					at = &pt.Records[i]
				}
			}
			var here bool
			switch {
			case e.Offset >= 0 && e.ID != "":
				here = at != nil && (at.ID == "" || at.ID == e.ID)
			case e.Offset >= 0:
				here = at != nil
			default:
				here = present[upKey{e.Topic, e.ID}]
			}
			if here {
				visible = true
			}
			loc := Anomaly{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, ID: e.ID}
			switch t.Outcome {
			case OutcomeAcknowledged:
				if here {
					continue
				}
				if at != nil {
					loc.Kind, loc.Detail = UpstreamOffsetMismatch, fmt.Sprintf("transaction %s was acknowledged at this offset, but the log holds payload %q there", t.ID, at.ID)
				} else {
					loc.Kind, loc.Detail = UpstreamLost, fmt.Sprintf("record of acknowledged transaction %s is not in the read_committed log", t.ID)
				}
				rp.add(loc)
			case OutcomeFailed:
				if here {
					loc.Kind, loc.Detail = UpstreamAbortedVisible, fmt.Sprintf("record of failed transaction %s is visible to read_committed consumers", t.ID)
					rp.add(loc)
				}
			}
		}
		if t.Outcome == OutcomeUnknown {
			if visible {
				sum.UnknownCommitted++
			} else {
				sum.UnknownAborted++
			}
		}
	}
	if notStable > 0 {
		rp.r.Notes = append(rp.r.Notes, fmt.Sprintf("%d producer log records are at or past the stable end of the scan: not checked", notStable))
	}
}
