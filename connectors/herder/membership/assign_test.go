package membership

import (
	"fmt"
	"testing"
	"time"
)

func tasks(c string, n int) []Unit {
	out := []Unit{{Connector: c, Task: -1}}
	for i := range n {
		out = append(out, Unit{Connector: c, Task: i})
	}
	return out
}

// owned returns each member's metadata claiming what out assigned it.
func owned(out AssignOutput, gen int32, workers map[string]string) map[string]Metadata {
	m := map[string]Metadata{}
	for id, w := range workers {
		m[id] = Metadata{Worker: w, Generation: gen}
	}
	for u, id := range out.Assigned {
		md, ok := m[id]
		if !ok {
			continue
		}
		md.Owned = append(md.Owned, u)
		m[id] = md
	}
	return m
}

func taskLoads(out AssignOutput) map[string]int {
	l := map[string]int{}
	for u, id := range out.Assigned {
		if u.Task >= 0 {
			l[id]++
		}
	}
	return l
}

func lastOf(out AssignOutput, workers map[string]string) map[Unit]string {
	l := map[Unit]string{}
	for u, id := range out.Assigned {
		l[u] = workers[id]
	}
	return l
}

func TestAssignSpreadsAndMovesOnlyWhatMust(t *testing.T) {
	now := time.Unix(1000, 0)
	workers := map[string]string{"m-a": "a:8083", "m-b": "b:8083", "m-c": "c:8083"}
	units := tasks("c1", 6)
	in := AssignInput{Units: units, Members: map[string]Metadata{}, Now: now, MaxDelay: time.Minute}
	for id, w := range workers {
		in.Members[id] = Metadata{Worker: w}
	}
	out := Assign(in)
	if len(out.Assigned) != 7 {
		t.Fatalf("assigned %d units, want 7: %v", len(out.Assigned), out.Assigned)
	}
	for id, n := range taskLoads(out) {
		if n != 2 {
			t.Errorf("%s runs %d tasks, want 2 (%v)", id, n, out.Assigned)
		}
	}

	// A fourth worker: one task moves to it, nothing else moves.
	workers4 := map[string]string{"m-a": "a:8083", "m-b": "b:8083", "m-c": "c:8083", "m-d": "d:8083"}
	in2 := AssignInput{Units: units, Members: owned(out, 1, workers4), Last: lastOf(out, workers), Now: now, MaxDelay: time.Minute}
	out2 := Assign(in2)
	moved := 0
	for u, id := range out2.Assigned {
		if out.Assigned[u] != id {
			moved++
			if id != "m-d" {
				t.Errorf("%v moved to %s, not to the new worker", u, id)
			}
		}
	}
	if moved != 1 || taskLoads(out2)["m-d"] != 1 {
		t.Errorf("%d units moved, the new worker runs %d tasks; want 1 and 1: %v", moved, taskLoads(out2)["m-d"], out2.Assigned)
	}
}

func TestAssignDelaysUnitsOfADepartedWorker(t *testing.T) {
	now := time.Unix(1000, 0)
	workers := map[string]string{"m-a": "a:8083", "m-b": "b:8083", "m-c": "c:8083"}
	units := append(tasks("c1", 6), tasks("solo", 1)...)
	out := Assign(AssignInput{Units: units, Members: owned(AssignOutput{}, 0, workers), Now: now})
	last := lastOf(out, workers)
	soloOwner := out.Assigned[Unit{"solo", 0}]
	// The worker running solo's only task leaves: solo moves at once (it
	// would run nowhere), c1's tasks of that worker wait for it.
	left := map[string]string{}
	for id, w := range workers {
		if id != soloOwner {
			left[id] = w
		}
	}
	in := AssignInput{Units: units, Members: owned(out, 1, left), Last: last, Now: now, MaxDelay: time.Minute}
	out2 := Assign(in)
	if id, ok := out2.Assigned[Unit{"solo", 0}]; !ok || id == soloOwner {
		t.Fatalf("solo-0 not reassigned at once: %v", out2.Assigned)
	}
	var pending []Unit
	for u := range out2.PendingSince {
		pending = append(pending, u)
	}
	if len(pending) == 0 || out2.NextCheck != time.Minute {
		t.Fatalf("pending %v, next check %v; want the departed worker's c1 units, due in 1m", pending, out2.NextCheck)
	}
	for _, u := range pending {
		if last[u] != workers[soloOwner] || u.Connector != "c1" {
			t.Errorf("pending %v was not the departed worker's c1 unit", u)
		}
		if _, ok := out2.Assigned[u]; ok {
			t.Errorf("pending %v is also assigned", u)
		}
	}

	// It comes back (new member id, same worker id) within the delay: it
	// gets them back.
	back := map[string]string{"m-x": workers[soloOwner]}
	for id, w := range left {
		back[id] = w
	}
	in3 := AssignInput{Units: units, Members: owned(out2, 2, back), Last: lastOf(out2, back), PendingSince: out2.PendingSince, Now: now.Add(30 * time.Second), MaxDelay: time.Minute}
	for u := range out2.PendingSince {
		in3.Last[u] = workers[soloOwner]
	}
	out3 := Assign(in3)
	for _, u := range pending {
		if out3.Assigned[u] != "m-x" {
			t.Errorf("%v went to %s, not back to its worker", u, out3.Assigned[u])
		}
	}

	// It does not come back: after the delay the units are assigned.
	in4 := in
	in4.PendingSince, in4.Now = out2.PendingSince, now.Add(61*time.Second)
	out4 := Assign(in4)
	if len(out4.PendingSince) != 0 || len(out4.Assigned) != len(units) {
		t.Errorf("after the delay: pending %v, %d of %d assigned", out4.PendingSince, len(out4.Assigned), len(units))
	}
	for id, n := range taskLoads(out4) {
		if n < 3 || n > 4 {
			t.Errorf("%s runs %d tasks, want 3 or 4 of 7", id, n)
		}
	}
}

func TestAssignResolvesDoubleClaims(t *testing.T) {
	u := Unit{"c1", 0}
	in := AssignInput{
		Units: []Unit{u},
		Members: map[string]Metadata{
			"zombie": {Worker: "a:8083", Generation: 3, Owned: []Unit{u}},
			"new":    {Worker: "b:8083", Generation: 5, Owned: []Unit{u}},
		},
		Now: time.Unix(1000, 0),
	}
	if got := Assign(in).Assigned[u]; got != "new" {
		t.Errorf("double claim went to %q, want the newest generation's", got)
	}
	// Units no longer wanted (a deleted connector) are dropped.
	in.Units = nil
	if got := Assign(in).Assigned; len(got) != 0 {
		t.Errorf("deleted units assigned: %v", got)
	}
}

func TestAssignSpreadsEachConnector(t *testing.T) {
	workers := map[string]string{}
	for i := range 3 {
		workers[fmt.Sprintf("m-%d", i)] = fmt.Sprintf("w%d:8083", i)
	}
	var units []Unit
	for _, c := range []string{"a", "b", "c"} {
		units = append(units, tasks(c, 3)...)
	}
	out := Assign(AssignInput{Units: units, Members: owned(AssignOutput{}, 0, workers), Now: time.Unix(1, 0)})
	for _, c := range []string{"a", "b", "c"} {
		per := map[string]int{}
		for u, id := range out.Assigned {
			if u.Connector == c && u.Task >= 0 {
				per[id]++
			}
		}
		if len(per) != 3 {
			t.Errorf("connector %s's 3 tasks on %d workers: %v", c, len(per), per)
		}
	}
	conns := map[string]int{}
	for u, id := range out.Assigned {
		if u.Task < 0 {
			conns[id]++
		}
	}
	if len(conns) != 3 {
		t.Errorf("3 connectors on %d workers: %v", len(conns), conns)
	}
}

func TestPlanAndMetadataVersions(t *testing.T) {
	p := Plan{Leader: "m", Assigned: []Placement{{Unit{"c", 0}, "m"}}}
	got, err := DecodePlan(p.Encode())
	if err != nil || len(got.Mine("m")) != 1 {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := DecodePlan([]byte(`{"v":2}`)); err == nil {
		t.Error("a plan of version 2 decoded")
	}
	if _, err := DecodeMetadata([]byte(`{"v":2,"worker":"x"}`)); err == nil {
		t.Error("metadata of version 2 decoded")
	}
}
