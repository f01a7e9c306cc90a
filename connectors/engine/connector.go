package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/convert"
)

// Connector is one running connector: its sink and its tasks.
type Connector struct {
	Config config.Connector
	Values config.Values
	Spec   connectors.Spec
	Sink   connectors.Sink

	// records is the record pipeline the connector's tasks run before
	// the sink.
	records *connectors.RecordPipeline
	log     *slog.Logger
	opt     TaskOptions
	gate    *gate // holds the tasks while PAUSED
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu    sync.Mutex
	errs  map[int]error    // terminal error per task
	runs  map[int]*taskRun // running tasks by id
	base  context.Context  // parent of every task's context; cancelled by Stop
	onEnd func(int, error) // onExit given to Start, reused by StartTask
}

// taskRun is one run of one task.
type taskRun struct {
	soft   context.CancelFunc // ends the task between rounds
	cancel context.CancelFunc // abandons the round in flight
	done   chan struct{}
}

// NewInstanceID returns a random id that makes this process's
// transactional ids unique.
func NewInstanceID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Open validates raw, opens the sink and runs the preflight check. The
// connector does not consume until Start.
func Open(ctx context.Context, reg *connectors.Registry, raw map[string]string, opt TaskOptions) (*Connector, error) {
	spec, v, errs := reg.Validate(raw)
	if len(errs) > 0 {
		return nil, errs
	}
	c := config.ParseConnector(v)
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	if opt.InstanceID == "" {
		opt.InstanceID = NewInstanceID()
	}
	pipe, err := convert.NewPipeline(v, convert.WithRegistryPolicy(reg.Policy().Registry))
	if err != nil {
		return nil, err
	}
	sink, err := spec.New(ctx, connectors.Env{Bootstrap: opt.Bootstrap, KafkaOpts: opt.KafkaOpts, Log: log.With("connector", c.Name), Pipeline: pipe, Policy: reg.Policy()}, c, v)
	if err != nil {
		return nil, err
	}
	g, err := connectors.ParseGuarantee(c.Delivery)
	if err == nil {
		err = connectors.Supports(sink, g)
	}
	if _, ok := sink.(connectors.RoundWriter); err == nil && c.SourceTxnsTopic != "" && !ok {
		err = config.Errors{{Name: config.KeySourceTxns, Msg: fmt.Sprintf("%s=%s needs a sink that writes a round in one transaction (PostgreSQL); ClickHouse has no transaction across tables (docs/cdc.md, Source transactions)", config.KeySourceTxns, config.SourceTxnsWhole)}}
	}
	if err == nil {
		err = sink.Preflight(ctx, g)
	}
	if err != nil {
		sink.Close()
		return nil, err
	}
	records := connectors.PipelineFor(pipe, c.ErrorsTolerance, sink)
	if c.SourceTxnsTopic != "" {
		records = records.Skipping(c.SourceTxnsTopic)
	}
	return &Connector{Config: c, Values: v, Spec: spec, Sink: sink, records: records, log: log, opt: opt, gate: newGate(false), errs: map[int]error{}, runs: map[int]*taskRun{}}, nil
}

// SetPaused pauses (true) or resumes (false) the connector's tasks, those
// running and those started later. A paused task finishes the round in
// flight, then stops fetching and holds between rounds; it stays in the
// consumer group and keeps its partitions (see gate).
func (c *Connector) SetPaused(paused bool) {
	c.mu.Lock()
	if c.gate == nil {
		c.gate = newGate(false)
	}
	g := c.gate
	c.mu.Unlock()
	g.set(paused)
}

// Start runs tasks.max tasks until Stop. onExit, when not nil, is called
// with each task's terminal error (nil when it stopped cleanly).
func (c *Connector) Start(onExit func(task int, err error)) {
	c.mu.Lock()
	c.onEnd = onExit
	c.mu.Unlock()
	for i := 0; i < c.Config.TasksMax; i++ {
		_ = c.StartTask(i, onExit)
	}
}

func (c *Connector) baseContext() context.Context {
	if c.base == nil {
		c.base, c.cancel = context.WithCancel(context.Background())
	}
	return c.base
}

// StartTask runs task id (0 <= id < tasks.max) again after it exited, or
// for the first time. It fails if the task is still running or the
// connector was stopped. onExit, when not nil, is called with the task's
// terminal error (nil when it stopped cleanly); a nil onExit reuses the one
// given to Start.
func (c *Connector) StartTask(id int, onExit func(task int, err error)) error {
	if id < 0 || id >= c.Config.TasksMax {
		return fmt.Errorf("connectors: %s has no task %d", c.Config.Name, id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[int]*taskRun{}
	}
	if c.errs == nil {
		c.errs = map[int]error{}
	}
	base := c.baseContext()
	if base.Err() != nil {
		return fmt.Errorf("connectors: %s is stopped", c.Config.Name)
	}
	if r := c.runs[id]; r != nil {
		select {
		case <-r.done:
		default:
			return fmt.Errorf("connectors: %s task %d is running", c.Config.Name, id)
		}
	}
	if onExit == nil {
		onExit = c.onEnd
	}
	ctx, cancel := context.WithCancel(base)
	soft, softCancel := context.WithCancel(ctx)
	r := &taskRun{soft: softCancel, cancel: cancel, done: make(chan struct{})}
	c.runs[id] = r
	delete(c.errs, id)
	t := NewTask(c.Config, id, c.Sink, c.opt)
	if c.gate == nil {
		c.gate = newGate(false)
	}
	t.gate = c.gate
	t.valueConverter = c.Values[convert.KeyValueConverter]
	t.records = c.records
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		err := t.RunGraceful(soft, ctx)
		if err != nil {
			c.log.Error("task failed", "connector", c.Config.Name, "task", id, "err", err)
		}
		c.mu.Lock()
		c.errs[id] = err
		c.mu.Unlock()
		close(r.done)
		if onExit != nil {
			onExit(id, err)
		}
	}()
	return nil
}

// StopTask stops task id gracefully (see Stop) and waits until it exited.
// It does nothing when the task is not running. The connector's sink stays
// open.
func (c *Connector) StopTask(id int) {
	c.mu.Lock()
	r := c.runs[id]
	c.mu.Unlock()
	if r == nil {
		return
	}
	c.stopRuns([]*taskRun{r})
}

// stopRuns ends runs between rounds, and abandons the rounds still in
// flight after shutdown.grace.ms.
func (c *Connector) stopRuns(runs []*taskRun) {
	for _, r := range runs {
		r.soft()
	}
	grace := time.NewTimer(c.Config.ShutdownGrace)
	defer grace.Stop()
	for _, r := range runs {
		select {
		case <-r.done:
		case <-grace.C:
			c.log.Warn("a round outlived shutdown.grace.ms; abandoning it (the next owner's recovery resolves what it left prepared)", "connector", c.Config.Name)
			for _, r := range runs {
				r.cancel()
			}
			<-r.done
		}
	}
}

// Stop ends the tasks gracefully and closes the sink: each task finishes
// the round in flight (commits or aborts it, resolving its prepared
// batches) and starts no new one. A round still running after
// shutdown.grace.ms is abandoned; what it left prepared is resolved by the
// next owner's recovery.
func (c *Connector) Stop() {
	c.mu.Lock()
	c.baseContext()
	runs := make([]*taskRun, 0, len(c.runs))
	for _, r := range c.runs {
		runs = append(runs, r)
	}
	c.mu.Unlock()
	c.stopRuns(runs)
	c.mu.Lock()
	c.cancel()
	c.mu.Unlock()
	c.wg.Wait()
	c.Sink.Close()
}

// Wait blocks until every task has exited and returns the first terminal
// error.
func (c *Connector) Wait() error {
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	var all []error
	for i := 0; i < c.Config.TasksMax; i++ {
		if err := c.errs[i]; err != nil {
			all = append(all, fmt.Errorf("task %d: %w", i, err))
		}
	}
	return errors.Join(all...)
}
