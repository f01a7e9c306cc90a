package twophase

import (
	"context"
	"errors"
	"fmt"
)

func ExampleCoordinator() {
	// In-memory participant and decider (see fakes_test.go); the runtime
	// uses a sink's Participant and a KafkaDecider.
	p := newFakeParticipant()
	d := newFakeDecider(nil)
	batches := testBatches(2)
	d.stage(batches) // what the Kafka session polled: its offsets commit with the decision

	c := NewCoordinator(p, d, WithPrepareConcurrency(2))
	res, err := c.Round(context.Background(), batches)
	fmt.Println(res.Outcome, err)

	// The next round: partition 1 has a new owner.
	next := []*Batch{{ID: BatchID{Connector: "c", Topic: "t", Partition: 0, First: 10, Last: 19}}, {ID: BatchID{Connector: "c", Topic: "t", Partition: 1, First: 20, Last: 29}}}
	d.stage(next)
	p.prepareErr[next[1].ID] = ErrFenced
	res, err = c.Round(context.Background(), next)
	fmt.Println(res.Outcome, res.Fenced, errors.Is(err, ErrFenced))

	// On start and on every assignment, before new work.
	rep, err := Recover(context.Background(), p, d, "c", nil)
	fmt.Println(len(rep.Committed), len(rep.Aborted), err)
	// Output:
	// Committed <nil>
	// Aborted [c/t[1]@20-29] true
	// 0 0 <nil>
}
