package connectors

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/txsink/txsink/config"
)

// Connector is one running connector: its sink and its tasks.
type Connector struct {
	Config config.Connector
	Values config.Values
	Spec   Spec
	Sink   Sink

	log    *slog.Logger
	opt    TaskOptions
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	errs map[int]error // terminal error per task
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
func Open(ctx context.Context, reg *Registry, raw map[string]string, opt TaskOptions) (*Connector, error) {
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
	sink, err := spec.New(ctx, Env{Bootstrap: opt.Bootstrap, KafkaOpts: opt.KafkaOpts, Log: log.With("connector", c.Name)}, c, v)
	if err != nil {
		return nil, err
	}
	if err := sink.Preflight(ctx, c.Delivery); err != nil {
		sink.Close()
		return nil, err
	}
	return &Connector{Config: c, Values: v, Spec: spec, Sink: sink, log: log, opt: opt, errs: map[int]error{}}, nil
}

// Start runs tasks.max tasks until Stop. onExit, when not nil, is called
// with each task's terminal error (nil when it stopped cleanly).
func (c *Connector) Start(onExit func(task int, err error)) {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	for i := 0; i < c.Config.TasksMax; i++ {
		t := NewTask(c.Config, i, c.Sink, c.opt)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			err := t.Run(ctx)
			if err != nil {
				c.log.Error("task failed", "connector", c.Config.Name, "task", i, "err", err)
			}
			c.mu.Lock()
			c.errs[i] = err
			c.mu.Unlock()
			if onExit != nil {
				onExit(i, err)
			}
		}()
	}
}

// Stop cancels the tasks, waits for them and closes the sink. A round in
// flight is abandoned at its next step; what it left prepared is resolved
// by the next owner's recovery.
func (c *Connector) Stop() {
	if c.cancel != nil {
		c.cancel()
	}
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
