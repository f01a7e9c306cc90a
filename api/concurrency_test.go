package api

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txsink/txsink/connectors/engine"
)

// TestConcurrentOperations drives several connectors through the API at
// once, each from several clients, while their tasks fail and restart on
// their own and /metrics and the expanded list are scraped: pause, resume,
// stop, PATCH config, restarts, status, offsets. No request may fail with
// a 500 or show the canary; afterwards every connector must still answer
// and run when resumed, the worker must close (a lock cycle would hang
// it), and a new worker on the same data directory must restore them all.
// Run with -race, it checks the herder's and the engine's per-connector
// locking.
func TestConcurrentOperations(t *testing.T) {
	e := newEnv(t)
	names := []string{"c0", "c1", "c2"}
	for _, n := range names {
		e.must(201, "POST", "/connectors", map[string]any{"name": n, "config": fakeConfig(n)})
	}
	for _, n := range names {
		e.waitState(n, engine.StateRunning, 1)
	}
	e.produce(20)

	type op struct {
		method, path string
		body         any
		codes        []int // the answers the state of the moment allows
	}
	ops := func(n string) []op {
		return []op{
			{"PUT", "/connectors/" + n + "/pause", nil, []int{202}},
			{"PUT", "/connectors/" + n + "/resume", nil, []int{202}},
			{"PUT", "/connectors/" + n + "/stop", nil, []int{204}},
			{"PATCH", "/connectors/" + n + "/config", map[string]string{"tasks.max": "2"}, []int{200}},
			{"PATCH", "/connectors/" + n + "/config", map[string]string{"tasks.max": "1"}, []int{200}},
			{"POST", "/connectors/" + n + "/restart", nil, []int{204}},
			{"POST", "/connectors/" + n + "/restart?includeTasks=true", nil, []int{202}},
			{"POST", "/connectors/" + n + "/tasks/0/restart", nil, []int{204, 404, 409}},
			{"GET", "/connectors/" + n + "/status", nil, []int{200}},
			{"GET", "/connectors/" + n + "/tasks/0/status", nil, []int{200, 404}},
			{"GET", "/connectors/" + n + "/offsets", nil, []int{200}},
			{"GET", "/connectors/" + n, nil, []int{200}},
		}
	}
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var problems []string
	check := func(method, path string, r resp, codes []int) {
		ok := false
		for _, c := range codes {
			ok = ok || r.code == c
		}
		if !ok || strings.Contains(string(r.body), canary) {
			mu.Lock()
			problems = append(problems, fmt.Sprintf("%s %s: %d %s", method, path, r.code, r.body))
			mu.Unlock()
		}
	}
	for i, n := range names {
		for client := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), uint64(client)))
				all := ops(n)
				for time.Now().Before(stop) {
					o := all[rng.IntN(len(all))]
					check(o.method, o.path, e.do(o.method, o.path, o.body), o.codes)
				}
			}()
		}
	}
	wg.Add(1)
	go func() { // tasks fail now and then, and restart on their own
		defer wg.Done()
		for time.Now().Before(stop) {
			e.store.mu.Lock()
			e.store.failWrites = 1
			e.store.mu.Unlock()
			e.produce(2)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(stop) {
			for _, path := range []string{"/metrics", "/connectors?expand=status&expand=info"} {
				r := e.do("GET", path, nil)
				check("GET", path, r, []int{200})
			}
		}
	}()
	wg.Wait()
	for _, p := range problems {
		t.Error(p)
	}

	for _, n := range names {
		e.must(200, "PATCH", "/connectors/"+n+"/config", map[string]string{"tasks.max": "1"})
		e.must(202, "PUT", "/connectors/"+n+"/resume", nil)
	}
	for _, n := range names {
		e.waitState(n, engine.StateRunning, 1)
	}
	closed := make(chan struct{})
	go func() {
		e.stop()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(60 * time.Second):
		t.Fatal("the worker did not close within 60 s after concurrent operations (a lock cycle?)")
	}
	e.start()
	got := e.must(http.StatusOK, "GET", "/connectors", nil).json(t)
	if fmt.Sprint(got) != fmt.Sprint([]any{"c0", "c1", "c2"}) {
		t.Fatalf("restored connectors %v, want c0 c1 c2", got)
	}
	for _, n := range names {
		e.waitState(n, engine.StateRunning, 1)
	}
}
