package connectors

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/connectors/record"
	"github.com/txsink/txsink/twophase"
)

// DeadLetterBook keeps the dead letters of batches a sink prepared or
// wrote until the runtime takes them: a sink embeds one to implement
// DeadLetterSource. The zero value is ready; it is safe for concurrent
// use.
type DeadLetterBook struct {
	mu sync.Mutex
	by map[twophase.BatchID][]DeadLetter
}

// Note keeps the bad records of batch id (recs are the batch's records,
// bad their errors, in offset order). A batch without bad records keeps
// nothing.
func (d *DeadLetterBook) Note(id twophase.BatchID, recs []*kgo.Record, bad []*record.Error) {
	if len(bad) == 0 {
		return
	}
	byOffset := make(map[int64]*kgo.Record, len(recs))
	for _, r := range recs {
		byOffset[r.Offset] = r
	}
	letters := make([]DeadLetter, 0, len(bad))
	for _, e := range bad {
		if r := byOffset[e.Offset]; r != nil {
			letters = append(letters, DeadLetter{Record: r, Err: e})
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.by == nil {
		d.by = map[twophase.BatchID][]DeadLetter{}
	}
	d.by[id] = letters
}

// TakeDeadLetters implements DeadLetterSource.
func (d *DeadLetterBook) TakeDeadLetters(ids []twophase.BatchID) []DeadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []DeadLetter
	for _, id := range ids {
		out = append(out, d.by[id]...)
		delete(d.by, id)
	}
	return out
}
