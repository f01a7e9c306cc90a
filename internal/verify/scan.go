package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Extractor pulls the payload id and the compared fields out of a record.
type Extractor struct {
	// IDField names the payload id: "" (none), "key" (the record key as
	// text), or a dotted path into the JSON value ("id", "meta.id"). A
	// Kafka Connect envelope ({"schema":…,"payload":…}) is unwrapped first.
	IDField string
	// Fields are dotted paths into the JSON value, compared with the
	// sink's columns of the same position in Config.CompareColumns.
	Fields []string
}

func (x Extractor) extract(key, value []byte) Record {
	var rec Record
	needJSON := len(x.Fields) > 0 || (x.IDField != "" && x.IDField != "key")
	var doc any
	if needJSON && len(value) > 0 {
		d := json.NewDecoder(bytes.NewReader(value))
		d.UseNumber()
		if err := d.Decode(&doc); err == nil {
			if m, ok := doc.(map[string]any); ok {
				if p, ok := m["payload"]; ok {
					if _, ok := m["schema"]; ok {
						doc = p
					}
				}
			}
		}
	}
	switch x.IDField {
	case "":
	case "key":
		rec.ID = string(key)
	default:
		if v := normalize(lookup(doc, x.IDField)); v != nil {
			rec.ID = *v
		}
	}
	if len(x.Fields) > 0 {
		rec.Fields = make([]*string, len(x.Fields))
		for i, f := range x.Fields {
			rec.Fields[i] = normalize(lookup(doc, f))
		}
	}
	return rec
}

// lookup follows a dotted path into a decoded JSON document.
func lookup(doc any, path string) any {
	cur := doc
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// normalize turns a decoded JSON value into the text PostgreSQL prints for
// the matching column (strings unquoted, numbers as written, objects as
// compact JSON), or nil for null and absent values.
func normalize(v any) *string {
	var s string
	switch v := v.(type) {
	case nil:
		return nil
	case string:
		s = v
	case json.Number:
		s = v.String()
	case bool:
		s = "false"
		if v {
			s = "true"
		}
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		s = string(b)
	}
	return &s
}

// ScanOptions configure a Kafka scan.
type ScanOptions struct {
	Bootstrap []string
	Topics    []string
	Extractor Extractor
	// Idle ends a partition's scan when no record arrived for it for this
	// long although its stable end was not reached (only aborted records
	// can remain then); default 5s.
	Idle time.Duration
	// KafkaOpts are extra client options (TLS, SASL, tests).
	KafkaOpts []kgo.Opt
	// Progress, when set, is called as the scan advances (at most every
	// ProgressEvery, default 200 ms) and once when it ends, on the
	// scanning goroutine.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Progress is how far an audit got.
type Progress struct {
	// Phase is "sink" while the sink is read, "scan" while Kafka is
	// scanned and "done" at the end of the scan.
	Phase string
	// Offsets scanned so far and in all, from each partition's log start
	// to its last stable offset (markers and aborted records included).
	Scanned, Total int64
	// Records are the committed records read so far.
	Records int64
}

// progressOf sums the scan's position over the partitions.
func progressOf(parts map[tp]*PartitionTruth, phase string) Progress {
	p := Progress{Phase: phase}
	for _, pt := range parts {
		p.Total += max(pt.StableEnd-pt.LogStart, 0)
		p.Scanned += max(min(pt.ScannedTo, pt.StableEnd)-pt.LogStart, 0)
		p.Records += int64(len(pt.Records))
	}
	return p
}

// Scan reads every partition of the topics from the log start to the last
// stable offset with read_committed isolation and returns the committed
// records. Transaction markers are read too (KeepControlRecords), so the
// scan knows when it reached the end even when the log ends in a marker.
func Scan(ctx context.Context, o ScanOptions) ([]PartitionTruth, error) {
	if len(o.Topics) == 0 {
		return nil, errors.New("scan: no topics")
	}
	if o.Idle <= 0 {
		o.Idle = 5 * time.Second
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(o.Bootstrap...)}, o.KafkaOpts...)
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return nil, fmt.Errorf("scan: kafka client: %w", err)
	}
	adm := kadm.NewClient(admCl)
	starts, err := adm.ListStartOffsets(ctx, o.Topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		admCl.Close()
		return nil, fmt.Errorf("scan: list start offsets: %w", err)
	}
	stable, err := adm.ListCommittedOffsets(ctx, o.Topics...)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		admCl.Close()
		return nil, fmt.Errorf("scan: list last stable offsets: %w", err)
	}
	hwms, err := adm.ListEndOffsets(ctx, o.Topics...)
	if err == nil {
		err = hwms.Error()
	}
	admCl.Close()
	if err != nil {
		return nil, fmt.Errorf("scan: list end offsets: %w", err)
	}
	for _, t := range o.Topics {
		if _, ok := stable[t]; !ok {
			return nil, fmt.Errorf("scan: topic %q does not exist", t)
		}
	}

	parts := map[tp]*PartitionTruth{}
	consume := map[string]map[int32]kgo.Offset{}
	last := map[tp]time.Time{}
	stable.Each(func(l kadm.ListedOffset) {
		k := tp{l.Topic, l.Partition}
		pt := &PartitionTruth{Topic: l.Topic, Partition: l.Partition, StableEnd: l.Offset}
		if s, ok := starts.Lookup(l.Topic, l.Partition); ok {
			pt.LogStart = s.Offset
		}
		if h, ok := hwms.Lookup(l.Topic, l.Partition); ok {
			pt.HighWatermark = h.Offset
		}
		pt.ScannedTo = pt.LogStart
		parts[k] = pt
		if pt.LogStart < pt.StableEnd {
			if consume[l.Topic] == nil {
				consume[l.Topic] = map[int32]kgo.Offset{}
			}
			consume[l.Topic][l.Partition] = kgo.NewOffset().At(pt.LogStart)
			last[k] = time.Now()
		}
	})

	every := o.ProgressEvery
	if every <= 0 {
		every = 200 * time.Millisecond
	}
	reported := time.Now()
	if o.Progress != nil {
		o.Progress(progressOf(parts, "scan"))
	}
	if len(last) > 0 {
		cl, err := kgo.NewClient(append(base,
			kgo.ConsumePartitions(consume),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
		)...)
		if err != nil {
			return nil, fmt.Errorf("scan: kafka client: %w", err)
		}
		defer cl.Close()
		for len(last) > 0 {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("scan: %w", err)
			}
			var ferr error
			fs.EachError(func(topic string, p int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
					ferr = fmt.Errorf("scan: fetch %s[%d]: %w", topic, p, err)
				}
			})
			if ferr != nil {
				return nil, ferr
			}
			now := time.Now()
			if o.Progress != nil && now.Sub(reported) >= every {
				o.Progress(progressOf(parts, "scan"))
				reported = now
			}
			fs.EachRecord(func(r *kgo.Record) {
				k := tp{r.Topic, r.Partition}
				pt := parts[k]
				if pt == nil || r.Offset >= pt.StableEnd {
					return
				}
				pt.ScannedTo = r.Offset + 1
				if _, ok := last[k]; ok {
					last[k] = now
				}
				if r.Attrs.IsControl() {
					return
				}
				rec := o.Extractor.extract(r.Key, r.Value)
				rec.Offset = r.Offset
				pt.Records = append(pt.Records, rec)
			})
			for k, at := range last {
				pt := parts[k]
				switch {
				case pt.ScannedTo >= pt.StableEnd:
					delete(last, k)
				case now.Sub(at) > o.Idle:
					pt.Incomplete = true
					delete(last, k)
				}
			}
			if len(last) > 0 && len(last) < len(consume) {
				var done map[string][]int32
				for t, ps := range consume {
					for p := range ps {
						if _, ok := last[tp{t, p}]; !ok {
							if done == nil {
								done = map[string][]int32{}
							}
							done[t] = append(done[t], p)
						}
					}
				}
				cl.PauseFetchPartitions(done)
			}
		}
	}
	if o.Progress != nil {
		o.Progress(progressOf(parts, "done"))
	}
	out := make([]PartitionTruth, 0, len(parts))
	for _, pt := range parts {
		out = append(out, *pt)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

// stableEnds lists the last stable offsets (the end of what read_committed
// consumers see) of the topics' partitions.
func stableEnds(ctx context.Context, bootstrap []string, opts []kgo.Opt, topics []string) (map[tp]int64, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrap...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	stable, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = stable.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list last stable offsets: %w", err)
	}
	out := map[tp]int64{}
	stable.Each(func(o kadm.ListedOffset) { out[tp{o.Topic, o.Partition}] = o.Offset })
	return out, nil
}
