package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/txsink/txsink/integration/harness"
)

// ConnectREST is the RESTDriver of cluster profiles: it acts on a lane's
// connector through the workers' REST API as a Kafka Connect client would,
// while the lane's producer keeps writing, and checks every answer's
// status and the connector and task states the status endpoint shows
// after each action (an error says which did not match). Each fault ends
// with the connector RUNNING and its stored offsets moving again. Requests
// go to the workers in turn (a write on a follower is forwarded to the
// leader). A 409 (a rebalance under way; an offsets edit while the stopped
// connector's consumer group still has members) is retried, as Connect's
// clients do, for up to restRetry, and so is a 404 on a GET (a follower
// that has not read the re-created connector from the config topic yet).
//
//   - RESTPause: PUT …/pause (202), PAUSED with every task PAUSED, the
//     stored offsets stand still (5 s to let a round in flight end, then
//     Hold more), PUT …/resume (202).
//   - RESTStop: PUT …/stop (204), STOPPED without tasks for Hold, PUT
//     …/resume (202).
//   - RESTRestart: POST …/restart?includeTasks=true&onlyFailed=false (202,
//     the connector and every task RESTARTING in the answer), POST
//     …/restart (204), POST …/tasks/0/restart (204).
//   - RESTConfig: PUT …/config with batch.max.records changed (200, the
//     new value in the answer, at once in GET …/config on the worker that
//     took the PUT, and soon on every worker: a follower that did not
//     forward the change reads it from the config topic a moment later,
//     as in Connect).
//   - RESTOffsets: PATCH …/offsets while RUNNING (400, as Connect), PUT
//     …/stop, PATCH …/offsets to the positions GET …/offsets shows (200,
//     the offsets unchanged afterwards), PUT …/resume. The edit bumps the
//     partitions' fences in the sink; an edit that moved the positions
//     would make the checker's verdict a judgement of the operator's
//     intent (a rewind replays records into the lane's insert table by
//     design), so the positions stay and the lane must stay exact.
//   - RESTRecreate: DELETE the connector (204; its status 404), wait
//     Hold, POST it again with the same name and configuration (201): it
//     resumes from the offsets stored in the sink, never behind them.
type ConnectREST struct {
	// Logf prints each action (nil: discard).
	Logf func(format string, args ...any)
}

// How long ConnectREST retries a 409 and waits for a state or progress.
const (
	restRetry = time.Minute
	restWait  = 2 * time.Minute
)

// restConn is one lane's connector as ConnectREST drives it.
type restConn struct {
	d    *ConnectREST
	lane LaneInfo
	n    int    // requests sent, to spread them over the workers
	last string // the worker that answered the last request
	pin  string // when set, the worker every request goes to
}

// Inject applies f to the lane's connector; it returns once the connector
// runs again and its stored offsets moved past where they were when the
// action began (the producer writes the whole time). Cancelling ctx
// abandons the action, which may leave the connector paused or stopped.
func (d *ConnectREST) Inject(ctx context.Context, lane LaneInfo, f Fault) error {
	if len(lane.URLs) == 0 {
		return errors.New("REST faults need a cluster profile (a lane of \"txsink run\" workers has no REST API)")
	}
	c := &restConn{d: d, lane: lane}
	before, err := c.offsets(ctx)
	if err != nil {
		return err
	}
	if err := c.act(ctx, f); err != nil {
		return err
	}
	if err := c.waitState(ctx, "RUNNING", lane.Tasks); err != nil {
		return err
	}
	return c.waitProgress(ctx, before)
}

func (c *restConn) logf(format string, args ...any) {
	if c.d.Logf != nil {
		c.d.Logf("rest %s: "+format, append([]any{c.lane.Name}, args...)...)
	}
}

func (c *restConn) act(ctx context.Context, f Fault) error {
	switch f.Kind {
	case RESTPause:
		if _, err := c.do(ctx, http.MethodPut, "/pause", nil, http.StatusAccepted); err != nil {
			return err
		}
		if err := c.waitState(ctx, "PAUSED", c.lane.Tasks); err != nil {
			return err
		}
		at, err := c.stable(ctx)
		if err != nil {
			return err
		}
		sleep(ctx, f.Hold)
		now, err := c.offsets(ctx)
		if err != nil {
			return err
		}
		if !maps.Equal(at, now) {
			return fmt.Errorf("the stored offsets moved while the connector was PAUSED: %v, then %v", at, now)
		}
		_, err = c.do(ctx, http.MethodPut, "/resume", nil, http.StatusAccepted)
		return err
	case RESTStop:
		if err := c.stop(ctx); err != nil {
			return err
		}
		sleep(ctx, f.Hold)
		_, err := c.do(ctx, http.MethodPut, "/resume", nil, http.StatusAccepted)
		return err
	case RESTRestart:
		body, err := c.do(ctx, http.MethodPost, "/restart?includeTasks=true&onlyFailed=false", nil, http.StatusAccepted)
		if err != nil {
			return err
		}
		var st connStatus
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Errorf("restart: answer %s: %w", body, err)
		}
		if err := st.want("RESTARTING", c.lane.Tasks); err != nil {
			return fmt.Errorf("restart with includeTasks=true&onlyFailed=false: the answer: %w", err)
		}
		if err := c.waitState(ctx, "RUNNING", c.lane.Tasks); err != nil {
			return err
		}
		if _, err := c.do(ctx, http.MethodPost, "/restart", nil, http.StatusNoContent); err != nil {
			return err
		}
		if err := c.waitState(ctx, "RUNNING", c.lane.Tasks); err != nil {
			return err
		}
		_, err = c.do(ctx, http.MethodPost, "/tasks/0/restart", nil, http.StatusNoContent)
		return err
	case RESTConfig:
		conf, err := c.config(ctx)
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(conf["batch.max.records"])
		v := strconv.Itoa(max(n, 100) - 50)
		conf["batch.max.records"] = v
		body, err := c.do(ctx, http.MethodPut, "/config", conf, http.StatusOK)
		if err != nil {
			return err
		}
		var info struct{ Config map[string]string }
		if err := json.Unmarshal(body, &info); err != nil || info.Config["batch.max.records"] != v {
			return fmt.Errorf("PUT …/config: answer %s (%v): want batch.max.records %s", body, err, v)
		}
		// The worker that took the PUT (or forwarded it to the leader)
		// shows the change at once; the others once they read the config
		// topic up to it (as in Connect).
		return c.waitConfig(ctx, "batch.max.records", v, c.last)
	case RESTOffsets:
		cur, err := c.offsetsBody(ctx)
		if err != nil {
			return err
		}
		if _, err := c.do(ctx, http.MethodPatch, "/offsets", cur, http.StatusBadRequest); err != nil {
			return fmt.Errorf("an offsets edit while RUNNING: %w", err)
		}
		if err := c.stop(ctx); err != nil {
			return err
		}
		// The offsets of the stopped connector: nothing writes any more.
		at, err := c.offsets(ctx)
		if err != nil {
			return err
		}
		if cur, err = c.offsetsBody(ctx); err != nil {
			return err
		}
		// The worker that shows STOPPED may answer before the leader's
		// assignment dropped the tasks: Connect's 400 until then.
		if _, err := c.do(ctx, http.MethodPatch, "/offsets", cur, http.StatusOK, http.StatusBadRequest); err != nil {
			return err
		}
		now, err := c.offsets(ctx)
		if err != nil {
			return err
		}
		if !maps.Equal(at, now) {
			return fmt.Errorf("PATCH …/offsets to the stored positions changed them: %v, then %v", at, now)
		}
		sleep(ctx, f.Hold)
		_, err = c.do(ctx, http.MethodPut, "/resume", nil, http.StatusAccepted)
		return err
	case RESTRecreate:
		conf, err := c.config(ctx)
		if err != nil {
			return err
		}
		at, err := c.offsets(ctx)
		if err != nil {
			return err
		}
		if _, err := c.do(ctx, http.MethodDelete, "", nil, http.StatusNoContent); err != nil {
			return err
		}
		if err := c.waitGone(ctx); err != nil {
			return err
		}
		sleep(ctx, f.Hold)
		if _, err := c.doAt(ctx, http.MethodPost, "/connectors", map[string]any{"name": c.lane.Connector, "config": conf}, http.StatusCreated); err != nil {
			return err
		}
		if err := c.waitState(ctx, "RUNNING", c.lane.Tasks); err != nil {
			return err
		}
		now, err := c.offsets(ctx)
		if err != nil {
			return err
		}
		for p, o := range at {
			if now[p] < o {
				return fmt.Errorf("the re-created connector's partition %d is at %d, behind the %d stored before the delete", p, now[p], o)
			}
		}
		return nil
	}
	return fmt.Errorf("not a REST fault: %s", f.Kind)
}

// stop stops the connector and waits until the status shows it STOPPED
// without tasks.
func (c *restConn) stop(ctx context.Context) error {
	if _, err := c.do(ctx, http.MethodPut, "/stop", nil, http.StatusNoContent); err != nil {
		return err
	}
	return c.waitState(ctx, "STOPPED", 0)
}

// do sends a request to the connector's path (below
// /connectors/{name}) and returns the answer's body; any status but want
// is an error (409, and the statuses in retry, are retried for up to
// restRetry).
func (c *restConn) do(ctx context.Context, method, path string, body any, want int, retry ...int) ([]byte, error) {
	return c.doAt(ctx, method, "/connectors/"+c.lane.Connector+path, body, want, retry...)
}

func (c *restConn) doAt(ctx context.Context, method, path string, body any, want int, retry ...int) ([]byte, error) {
	deadline := time.Now().Add(restRetry)
	for {
		base := c.lane.URLs[c.n%len(c.lane.URLs)]
		c.n++
		if c.pin != "" {
			base = c.pin
		}
		code, out, err := callJSON(ctx, method, base+path, body)
		c.last = base
		if err == nil && code == want {
			if method != http.MethodGet {
				c.logf("%s %s: %d", method, path, code)
			}
			return out, nil
		}
		// A GET on a follower that has not read the config topic up to a
		// create yet gets 404 for a moment: retried too.
		retried := code == http.StatusConflict || slices.Contains(retry, code) || method == http.MethodGet && code == http.StatusNotFound
		if err == nil && !retried || time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s on %s: %d %s (%v), want %d", method, path, base, code, out, err, want)
		}
		c.logf("%s %s: %d %s (%v), retrying", method, path, code, out, err)
		sleep(ctx, 500*time.Millisecond)
	}
}

// connStatus is Connect's status of a connector.
type connStatus struct {
	Connector struct{ State string }
	Tasks     []struct {
		ID    int
		State string
		Trace string
	}
}

// want checks the connector and its tasks (tasks of them; 0: none) are
// all in state.
func (s connStatus) want(state string, tasks int) error {
	if s.Connector.State != state || len(s.Tasks) != tasks {
		return fmt.Errorf("connector %s with %d tasks, want %s with %d", s.Connector.State, len(s.Tasks), state, tasks)
	}
	for _, t := range s.Tasks {
		if t.State != state {
			return fmt.Errorf("task %d %s, want %s (trace %q)", t.ID, t.State, state, t.Trace)
		}
	}
	return nil
}

// waitState waits until GET …/status shows the connector and tasks tasks
// in state.
func (c *restConn) waitState(ctx context.Context, state string, tasks int) error {
	deadline := time.Now().Add(restWait)
	for {
		body, err := c.do(ctx, http.MethodGet, "/status", nil, http.StatusOK)
		if err != nil {
			return err
		}
		var st connStatus
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Errorf("status %s: %w", body, err)
		}
		werr := st.want(state, tasks)
		if werr == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("status after %v: %w", restWait, werr)
		}
		sleep(ctx, 300*time.Millisecond)
	}
}

// waitGone waits until the deleted connector's status is 404 on every
// worker.
func (c *restConn) waitGone(ctx context.Context) error {
	deadline := time.Now().Add(restWait)
	for _, base := range c.lane.URLs {
		for {
			code, out, err := callJSON(ctx, http.MethodGet, base+"/connectors/"+c.lane.Connector+"/status", nil)
			if err == nil && code == http.StatusNotFound {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("status of the deleted connector on %s: %d %s (%v), want 404", base, code, out, err)
			}
			sleep(ctx, 300*time.Millisecond)
		}
	}
	return nil
}

// waitConfig checks GET …/config on worker first shows key = v, then waits
// until every worker does.
func (c *restConn) waitConfig(ctx context.Context, key, v, first string) error {
	defer func() { c.pin = "" }()
	deadline := time.Now().Add(restWait)
	for i, base := range append([]string{first}, c.lane.URLs...) {
		c.pin = base
		for {
			conf, err := c.config(ctx)
			if err != nil {
				return err
			}
			if conf[key] == v {
				break
			}
			if i == 0 || time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("GET …/config on %s after the update: %s %q, want %s", base, key, conf[key], v)
			}
			sleep(ctx, 300*time.Millisecond)
		}
	}
	return nil
}

// config returns GET …/config.
func (c *restConn) config(ctx context.Context) (map[string]string, error) {
	body, err := c.do(ctx, http.MethodGet, "/config", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var conf map[string]string
	if err := json.Unmarshal(body, &conf); err != nil {
		return nil, fmt.Errorf("config %s: %w", body, err)
	}
	return conf, nil
}

// offsetsBody returns GET …/offsets as it came.
func (c *restConn) offsetsBody(ctx context.Context) (harness.ConnectOffsets, error) {
	var o harness.ConnectOffsets
	body, err := c.do(ctx, http.MethodGet, "/offsets", nil, http.StatusOK)
	if err != nil {
		return o, err
	}
	if err := json.Unmarshal(body, &o); err != nil {
		return o, fmt.Errorf("offsets %s: %w", body, err)
	}
	return o, nil
}

// offsets returns the stored next offset by partition of the lane's topic.
func (c *restConn) offsets(ctx context.Context) (map[int32]int64, error) {
	o, err := c.offsetsBody(ctx)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, e := range o.Offsets {
		if e.Partition.Topic == c.lane.Topic {
			out[e.Partition.Partition] = e.Offset.Offset
		}
	}
	return out, nil
}

// stable waits until the stored offsets stood still for 5 s (a round in
// flight when the pause came runs to its end first) and returns them.
func (c *restConn) stable(ctx context.Context) (map[int32]int64, error) {
	const still = 5 * time.Second
	deadline := time.Now().Add(restWait)
	last, err := c.offsets(ctx)
	if err != nil {
		return nil, err
	}
	since := time.Now()
	for time.Since(since) < still {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("the stored offsets still move %v after the connector showed PAUSED: %v", restWait, last)
		}
		sleep(ctx, 500*time.Millisecond)
		now, err := c.offsets(ctx)
		if err != nil {
			return nil, err
		}
		if !maps.Equal(last, now) {
			last, since = now, time.Now()
		}
	}
	return last, nil
}

// waitProgress waits until the stored offsets of the lane's topic moved
// past before (the producer writes the whole time).
func (c *restConn) waitProgress(ctx context.Context, before map[int32]int64) error {
	deadline := time.Now().Add(restWait)
	sum := func(m map[int32]int64) (n int64) {
		for _, o := range m {
			n += o
		}
		return n
	}
	for {
		now, err := c.offsets(ctx)
		if err != nil {
			return err
		}
		if sum(now) > sum(before) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("no progress within %v of the action: offsets %v, before %v", restWait, now, before)
		}
		sleep(ctx, 500*time.Millisecond)
	}
}
