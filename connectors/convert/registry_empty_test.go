package convert

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/txsink/txsink/connectors/record"
)

// restartableRegistry is srfake at a fixed URL whose state restart
// throws away, as an in-memory registry restarted.
type restartableRegistry struct {
	URL string
	cur atomic.Pointer[srfake.Registry]
}

func newRestartableRegistry(t *testing.T) *restartableRegistry {
	t.Helper()
	rr := &restartableRegistry{}
	rr.cur.Store(srfake.NewRegistry())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rr.cur.Load().Handler().ServeHTTP(w, r)
	}))
	rr.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		forgetRegistry(srv.URL)
	})
	forgetRegistry(srv.URL)
	return rr
}

func (rr *restartableRegistry) restartEmpty() { rr.cur.Store(srfake.NewRegistry()) }

func (rr *restartableRegistry) register(t *testing.T, subject, schema string) int {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(rr.URL))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cl.CreateSchema(context.Background(), subject, sr.Schema{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return ss.ID
}

// TestRegistryRestartedEmpty: a schema id the registry does not have is a
// bad record while the registry has its schemas, and the task waits
// (record.ErrUnavailable) once it lost them: it no longer has an id it
// served this process, or it has no schema at all. Ids fetched before
// keep decoding, and the id decodes once the registry has it again.
func TestRegistryRestartedEmpty(t *testing.T) {
	ctx := context.Background()
	schema := `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`
	rr := newRestartableRegistry(t)
	id := rr.register(t, "r-value", schema)
	c := newConverter(t, AvroClass, map[string]string{SettingRegistryURL: rr.URL})
	good := avroFrame(t, schema, id, map[string]any{"a": "x"})
	convertOK(t, c, good)

	other := id + 1 // not registered yet
	unknown := frame(t, other, nil, good[5:])
	_, err := c.Convert(ctx, "t", nil, unknown, &Buffer{})
	if !errors.Is(err, record.ErrDecode) || errors.Is(err, record.ErrUnavailable) {
		t.Fatalf("id %d unknown to a registry that has its schemas: err = %v, want a bad record", other, err)
	}

	rr.restartEmpty()
	_, err = c.Convert(ctx, "t", nil, unknown, &Buffer{})
	if !errors.Is(err, record.ErrUnavailable) || errors.Is(err, record.ErrDecode) {
		t.Fatalf("after the registry restarted empty: err = %v, want it waiting (ErrUnavailable)", err)
	}
	if !strings.Contains(err.Error(), "lost its schemas") || !strings.Contains(err.Error(), "schema id "+itoaTest(other)) {
		t.Errorf("err = %v, want it to name the id and say the registry lost its schemas", err)
	}
	convertOK(t, c, good) // fetched before: still decodes

	// A process that fetched nothing from it (another converter's URL key
	// is the same, so a second registry stands for it): an empty registry
	// is a waiting, not a bad record.
	empty := newRestartableRegistry(t)
	c2 := newConverter(t, AvroClass, map[string]string{SettingRegistryURL: empty.URL})
	_, err = c2.Convert(ctx, "t", nil, frame(t, 1, nil, good[5:]), &Buffer{})
	if !errors.Is(err, record.ErrUnavailable) || !strings.Contains(err.Error(), "no schema at all") {
		t.Fatalf("unknown id from a registry with no schema: err = %v, want it waiting, saying the registry has no schema", err)
	}

	// The schemas come back with their ids: the record decodes.
	if got := rr.register(t, "r-value", schema); got != id {
		t.Fatalf("re-registered with id %d, want %d", got, id)
	}
	if got := rr.register(t, "s-value", `{"type":"record","name":"S","fields":[{"name":"a","type":"string"}]}`); got != other {
		t.Fatalf("second schema got id %d, want %d", got, other)
	}
	convertOK(t, c, unknown)
}
