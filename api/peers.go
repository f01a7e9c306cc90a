package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// In distributed mode a worker answers a connector's status from the
// cluster's shared state (Kafka Connect's fields of every task) and its own
// engine; txsink's details of a task (partitions, lag, in-doubt batches,
// the last round) exist only on the worker that runs it. So that every
// worker answers alike, the API asks the workers that run the connector's
// other parts for their own view (GET …/status with localStatusHeader,
// answered without asking further) and shows each part as its worker sees
// it. A worker that does not answer within peerTimeout leaves its parts as
// the shared state shows them.

// localStatusHeader asks a worker for its own view only.
const localStatusHeader = "X-Txsink-Local-Status"

// peerTimeout bounds the peers' answers.
const peerTimeout = 3 * time.Second

// owners is a herder whose connectors run in part on other workers
// (herder.Distributed).
type owners interface {
	Owners(name string) (connector string, tasks map[int]string)
}

// withPeers replaces the parts of st that other workers run with their
// own view of them.
func (s *Server) withPeers(r *http.Request, name string, st *connectorStatus) {
	o, ok := s.h.(owners)
	if !ok || r.Header.Get(localStatusHeader) != "" {
		return
	}
	connURL, tasks := o.Owners(name)
	urls := map[string]bool{}
	if connURL != "" {
		urls[connURL] = true
	}
	for _, u := range tasks {
		urls[u] = true
	}
	if len(urls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), peerTimeout)
	defer cancel()
	var mu sync.Mutex
	views := map[string]connectorStatus{}
	var wg sync.WaitGroup
	for u := range urls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, ok := s.peerStatus(ctx, r, u, name); ok {
				mu.Lock()
				views[u] = v
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if v, ok := views[connURL]; ok && connURL != "" && v.Connector.WorkerID == st.Connector.WorkerID {
		st.Connector = v.Connector
	}
	for i, t := range st.Tasks {
		v, ok := views[tasks[t.ID]]
		if !ok {
			continue
		}
		for _, vt := range v.Tasks {
			if vt.ID == t.ID && vt.WorkerID == t.WorkerID {
				st.Tasks[i] = vt
			}
		}
	}
}

// peerStatus asks a worker for its own view of a connector's status.
func (s *Server) peerStatus(ctx context.Context, r *http.Request, base, name string) (connectorStatus, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/connectors/"+url.PathEscape(name)+"/status", nil)
	if err != nil {
		return connectorStatus{}, false
	}
	req.Header.Set(localStatusHeader, "true")
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := s.forwardClient().Do(req)
	if err != nil {
		s.log.Debug("a peer did not answer for its part of a status", "url", base, "err", err)
		return connectorStatus{}, false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return connectorStatus{}, false
	}
	var v connectorStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, forwardBodyLimit)).Decode(&v); err != nil {
		return connectorStatus{}, false
	}
	return v, true
}
