package engine

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txsink/txsink/offsets"
)

// LagReader counts lag as the status does (see exactLagWindow) for a
// process that runs a Connector without an Engine: "txsink run" logs it in
// its progress lines. It reads with the client it is given and does not
// close it.
type LagReader struct {
	e *Engine
}

// NewLagReader returns a LagReader that asks Kafka through cl.
func NewLagReader(cl *kgo.Client, log *slog.Logger) *LagReader {
	if log == nil {
		log = slog.Default()
	}
	return &LagReader{e: &Engine{adminCl: cl, admin: kadm.NewClient(cl), opt: Options{Log: log}}}
}

// Lag returns the summed lag of the positions (those without a stored
// next offset are skipped) and how many of them Kafka answered for before
// ctx ended.
func (r *LagReader) Lag(ctx context.Context, positions []offsets.Position) (lag int64, known int) {
	var at []lagAt
	for _, p := range positions {
		if p.Next >= 0 {
			at = append(at, lagAt{tp{p.Topic, p.Partition}, p.Next})
		}
	}
	_, lags := r.e.partitionLags(ctx, at)
	for _, n := range lags {
		lag += n
		known++
	}
	return lag, known
}
