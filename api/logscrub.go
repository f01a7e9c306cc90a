package api

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/txsink/txsink/connectors"
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
	secrets := h.secrets()
	out := slog.NewRecord(r.Time, r.Level, connectors.ScrubString(r.Message, secrets), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(scrubAttr(a, secrets))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h *scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	secrets := h.secrets()
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = scrubAttr(a, secrets)
	}
	return &scrubHandler{inner: h.inner.WithAttrs(clean), secrets: h.secrets}
}

func (h *scrubHandler) WithGroup(g string) slog.Handler {
	return &scrubHandler{inner: h.inner.WithGroup(g), secrets: h.secrets}
}

func scrubAttr(a slog.Attr, secrets []string) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, connectors.ScrubString(v.String(), secrets))
	case slog.KindGroup:
		as := v.Group()
		out := make([]any, len(as))
		for i, x := range as {
			out[i] = scrubAttr(x, secrets)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		return slog.String(a.Key, connectors.ScrubString(fmt.Sprint(v.Any()), secrets))
	}
	return a
}
