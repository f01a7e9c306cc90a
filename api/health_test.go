package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/connectors/engine"
)

// waitingHerder is a herder whose tasks wait (only what GET /health
// calls is implemented).
type waitingHerder struct {
	Herder
	waiting []engine.TaskWaiting
}

func (waitingHerder) Ready(context.Context) (bool, error) { return true, nil }
func (waitingHerder) Secrets() []string                   { return nil }
func (h waitingHerder) Waiting() []engine.TaskWaiting     { return h.waiting }

// TestHealthWaiting: GET /health stays 200 while tasks wait, counts them
// and lists them with their causes; with authentication configured it
// names no connector (the probe is open to anyone), and it never shows
// the errors, which may name hosts and users.
func TestHealthWaiting(t *testing.T) {
	since := time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)
	h := waitingHerder{waiting: []engine.TaskWaiting{
		{Connector: "orders", Task: 0, Waiting: engine.Waiting{Cause: engine.CauseBroker, Since: since, Error: "no Kafka broker answers: dial tcp internal-kafka:9092"}},
		{Connector: "orders", Task: 0, Waiting: engine.Waiting{Cause: engine.CauseDatabase, Since: since, Error: "connect to PostgreSQL at internal-pg:5432 as app"}},
		{Connector: "audit", Task: 1, Waiting: engine.Waiting{Cause: engine.CauseTopic, Since: since, Error: "topic audit does not exist"}},
	}}
	get := func(opt Options) (int, healthBody, string) {
		t.Helper()
		opt.Herder = h
		rec := httptest.NewRecorder()
		New(opt).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
		var body healthBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		return rec.Code, body, rec.Body.String()
	}

	code, body, raw := get(Options{})
	if code != 200 || body.Status != "healthy" || !strings.Contains(body.Message, "2 task(s) waiting for a dependency") {
		t.Fatalf("open API: %d %s", code, raw)
	}
	if len(body.Waiting) != 3 || body.Waiting[0] != (healthWaiting{Connector: "orders", Task: 0, Cause: "broker", Since: since}) ||
		body.Waiting[2] != (healthWaiting{Connector: "audit", Task: 1, Cause: "topic", Since: since}) {
		t.Errorf("open API: waiting %+v", body.Waiting)
	}
	code, body, raw = get(Options{Auth: Auth{BearerToken: "t0ken"}})
	if code != 200 || len(body.Waiting) != 0 || strings.Contains(raw, "orders") || !strings.Contains(body.Message, "2 task(s) waiting") {
		t.Errorf("with authentication: %d %s", code, raw)
	}
	for _, o := range []Options{{}, {Auth: Auth{BearerToken: "t0ken"}}} {
		if _, _, raw := get(o); strings.Contains(raw, "internal-") {
			t.Errorf("/health shows an error: %s", raw)
		}
	}
	h.waiting = nil
	code, body, raw = get(Options{})
	if code != 200 || body.Waiting != nil || strings.Contains(raw, "waiting") {
		t.Errorf("nothing waits: %d %s", code, raw)
	}
}
