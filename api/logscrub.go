package api

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/txsink/txsink/connectors/secrets"
)

// NewScrubHandler returns a handler that removes secrets from every log
// record before inner writes it: the strings secrets returns (connector
// passwords) and credentials inside URLs, in the message and in every
// string, error or other formatted attribute value. It is the last line of
// defence: code should not log configuration values in the first place.
func NewScrubHandler(inner slog.Handler, secrets func() []string) slog.Handler {
	return &scrubHandler{inner: inner, secrets: secrets}
}

type scrubHandler struct {
	inner   slog.Handler
	secrets func() []string
}

func (h *scrubHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	secs := h.secrets()
	out := slog.NewRecord(r.Time, r.Level, secrets.ScrubString(r.Message, secs), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(scrubAttr(a, secs))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h *scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	secs := h.secrets()
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = scrubAttr(a, secs)
	}
	return &scrubHandler{inner: h.inner.WithAttrs(clean), secrets: h.secrets}
}

func (h *scrubHandler) WithGroup(g string) slog.Handler {
	return &scrubHandler{inner: h.inner.WithGroup(g), secrets: h.secrets}
}

func scrubAttr(a slog.Attr, secs []string) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, secrets.ScrubString(v.String(), secs))
	case slog.KindGroup:
		as := v.Group()
		out := make([]any, len(as))
		for i, x := range as {
			out[i] = scrubAttr(x, secs)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		return slog.String(a.Key, secrets.ScrubString(fmt.Sprint(v.Any()), secs))
	default:
		// Numbers, durations, times: a value from a config provider
		// (tasks.max) may be logged as one. Kept as it is unless its text
		// holds a secret.
		if txt := v.String(); secrets.ScrubString(txt, secs) != txt {
			return slog.String(a.Key, secrets.Hidden)
		}
	}
	return a
}
