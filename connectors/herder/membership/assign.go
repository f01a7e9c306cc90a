package membership

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Unit is what the leader assigns: a connector (Task == -1: its own state)
// or one of its tasks.
type Unit struct {
	Connector string `json:"c"`
	Task      int    `json:"t"`
}

// String formats a unit as Connect does ("c" or "c-2").
func (u Unit) String() string {
	if u.Task < 0 {
		return u.Connector
	}
	return fmt.Sprintf("%s-%d", u.Connector, u.Task)
}

func compareUnits(a, b Unit) int {
	return cmp.Or(cmp.Compare(a.Connector, b.Connector), cmp.Compare(a.Task, b.Task))
}

// Version of Metadata and Plan; a member whose metadata has another
// version gets nothing assigned and an error in its plan.
const Version = 1

// Metadata is a member's metadata in protocol txsink-v1.
type Metadata struct {
	V int `json:"v"`
	// Worker is the worker's id (its advertised host:port), URL its
	// advertised REST URL.
	Worker string `json:"worker"`
	URL    string `json:"url"`
	// ConfigOffset is how far the worker read the config topic.
	ConfigOffset int64 `json:"config_offset"`
	// Owned is what the worker runs, under the assignment of Generation.
	Generation int32  `json:"generation"`
	Owned      []Unit `json:"owned"`
	// Signs is set by a worker that signs the config and status topics'
	// records: the leader writes the cluster's key only when every member
	// does (an older worker would write records the others ignore).
	Signs bool `json:"signs,omitempty"`
}

// Worker is a member of a generation.
type Worker struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// Placement is one assigned unit and its member.
type Placement struct {
	Unit
	Member string `json:"m"`
}

// Plan is the leader's assignment of one generation. Every member gets
// the same plan (so every worker knows who runs what) and takes its own
// part by its member id.
type Plan struct {
	V int `json:"v"`
	// Error, when not "", says why the leader could not assign: the
	// member joins again after a pause.
	Error string `json:"error,omitempty"`
	// Leader is the leader's member id, LeaderURL its REST URL.
	Leader    string `json:"leader"`
	LeaderURL string `json:"leader_url"`
	// ConfigOffset is the config topic offset the plan was made at: a
	// member reads the topic up to it before it applies the plan.
	ConfigOffset int64             `json:"config_offset"`
	Workers      map[string]Worker `json:"workers"`
	Assigned     []Placement       `json:"assigned"`
	// Pending units wait for their worker to come back
	// (scheduled.rebalance.max.delay.ms).
	Pending []Waiting `json:"pending,omitempty"`
}

// Waiting is a unit kept unassigned for the worker that had it.
type Waiting struct {
	Unit
	// Worker is the id of the worker that had it; Since is when it left.
	Worker string    `json:"w"`
	Since  time.Time `json:"since"`
}

// Memory returns what the next assignment needs to know of this plan: the
// worker each unit was assigned to (or waits for), and since when the
// waiting ones wait. Every member holds the plan, so a new leader
// continues a delay where the old one left it.
func (p Plan) Memory() (last map[Unit]string, since map[Unit]time.Time) {
	last, since = map[Unit]string{}, map[Unit]time.Time{}
	for _, a := range p.Assigned {
		last[a.Unit] = p.Workers[a.Member].ID
	}
	for _, w := range p.Pending {
		last[w.Unit], since[w.Unit] = w.Worker, w.Since
	}
	return last, since
}

// Encode returns the plan's wire form.
func (p Plan) Encode() []byte {
	p.V = Version
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("membership: encoding a plan: %v", err)) // strings and numbers only
	}
	return b
}

// DecodePlan reads a plan; another version is an error.
func DecodePlan(b []byte) (Plan, error) {
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return Plan{}, fmt.Errorf("assignment is not a txsink plan: %w", err)
	}
	if p.V != Version {
		return Plan{}, fmt.Errorf("assignment has version %d; this txsink reads version %d", p.V, Version)
	}
	return p, nil
}

// Encode returns the metadata's wire form.
func (m Metadata) Encode() []byte {
	m.V = Version
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("membership: encoding metadata: %v", err))
	}
	return b
}

// DecodeMetadata reads a member's metadata; another version is an error.
func DecodeMetadata(b []byte) (Metadata, error) {
	var m Metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return Metadata{}, fmt.Errorf("member metadata is not txsink's: %w", err)
	}
	if m.V != Version {
		return Metadata{}, fmt.Errorf("member metadata has version %d; this txsink reads version %d", m.V, Version)
	}
	return m, nil
}

// Mine returns the units a plan assigns to member.
func (p Plan) Mine(member string) []Unit {
	var out []Unit
	for _, a := range p.Assigned {
		if a.Member == member {
			out = append(out, a.Unit)
		}
	}
	return out
}

// Owner returns the member a unit is assigned to.
func (p Plan) Owner(u Unit) (string, bool) {
	for _, a := range p.Assigned {
		if a.Unit == u {
			return a.Member, true
		}
	}
	return "", false
}

// AssignInput is what the leader assigns from.
type AssignInput struct {
	// Members are the members of the new generation with their metadata.
	Members map[string]Metadata
	// Units is everything that must run.
	Units []Unit
	// Last maps each unit to the worker id (not member id) that had it in
	// the last plan, and PendingSince the units that have waited since
	// when (Plan.Memory).
	Last         map[Unit]string
	PendingSince map[Unit]time.Time
	Now          time.Time
	// MaxDelay is scheduled.rebalance.max.delay.ms.
	MaxDelay time.Duration
}

// AssignOutput is the leader's decision.
type AssignOutput struct {
	// Assigned maps units to member ids.
	Assigned map[Unit]string
	// PendingSince holds the units kept unassigned for their departed
	// worker, and since when; NextCheck (0: none) is when the earliest of
	// them is due (the leader rebalances then).
	PendingSince map[Unit]time.Time
	NextCheck    time.Duration
}

// Assign decides who runs what, incrementally (Kafka Connect's KIP-415
// idea): a unit stays with the member that runs it; a unit claimed twice
// (a worker that was cut off and came back) stays with the claim of the
// newest generation; a unit of a departed worker waits up to MaxDelay for
// that worker (by id) to come back, unless its connector would then have
// no task running anywhere; new and released units go to the least loaded
// members; then tasks and connectors move, one at a time, from the most
// to the least loaded member until no two members differ by more than
// one. Tasks of one connector are spread across members where the loads
// allow. Members with metadata of another version are given nothing.
func Assign(in AssignInput) AssignOutput {
	out := AssignOutput{Assigned: map[Unit]string{}, PendingSince: map[Unit]time.Time{}}
	members := slices.Sorted(func(yield func(string) bool) {
		for id := range in.Members {
			if !yield(id) {
				return
			}
		}
	})
	if len(members) == 0 {
		return out
	}
	valid := map[Unit]bool{}
	for _, u := range in.Units {
		valid[u] = true
	}
	claimGen := map[Unit]int32{}
	for _, id := range members {
		m := in.Members[id]
		for _, u := range m.Owned {
			if !valid[u] {
				continue
			}
			if g, ok := claimGen[u]; !ok || m.Generation > g {
				out.Assigned[u], claimGen[u] = id, m.Generation
			}
		}
	}
	byWorker := map[string]string{}
	for _, id := range members {
		if w := in.Members[id].Worker; w != "" {
			if _, dup := byWorker[w]; !dup {
				byWorker[w] = id
			}
		}
	}
	running := map[string]bool{} // connectors with a task on a member
	for u := range out.Assigned {
		if u.Task >= 0 {
			running[u.Connector] = true
		}
	}
	units := slices.Clone(in.Units)
	slices.SortFunc(units, compareUnits)
	var fresh []Unit
	for _, u := range units {
		if _, ok := out.Assigned[u]; ok {
			continue
		}
		last, had := in.Last[u]
		if id, back := byWorker[last]; had && back {
			out.Assigned[u] = id // its worker came back
			if u.Task >= 0 {
				running[u.Connector] = true
			}
			continue
		}
		if had && in.MaxDelay > 0 && running[u.Connector] {
			since, ok := in.PendingSince[u]
			if !ok {
				since = in.Now
			}
			if in.Now.Sub(since) < in.MaxDelay {
				out.PendingSince[u] = since
				due := since.Add(in.MaxDelay).Sub(in.Now)
				if out.NextCheck == 0 || due < out.NextCheck {
					out.NextCheck = due
				}
				continue
			}
		}
		fresh = append(fresh, u)
	}
	load := func(id string, tasks bool) int {
		n := 0
		for u, m := range out.Assigned {
			if m == id && (u.Task >= 0) == tasks {
				n++
			}
		}
		return n
	}
	same := func(id, connector string) int {
		n := 0
		for u, m := range out.Assigned {
			if m == id && u.Connector == connector && u.Task >= 0 {
				n++
			}
		}
		return n
	}
	// Tasks first, so connectors can go where tasks are fewest.
	for _, tasks := range []bool{true, false} {
		for _, u := range fresh {
			if (u.Task >= 0) != tasks {
				continue
			}
			best := ""
			for _, id := range members {
				if best == "" || cmp.Or(cmp.Compare(load(id, tasks), load(best, tasks)), cmp.Compare(same(id, u.Connector), same(best, u.Connector))) < 0 {
					best = id
				}
			}
			out.Assigned[u] = best
		}
	}
	for _, tasks := range []bool{true, false} {
		for range len(units) + 1 {
			hi, lo := members[0], members[0]
			for _, id := range members {
				if load(id, tasks) > load(hi, tasks) {
					hi = id
				}
				if load(id, tasks) < load(lo, tasks) {
					lo = id
				}
			}
			if load(hi, tasks)-load(lo, tasks) <= 1 {
				break
			}
			// Move the unit whose connector is most crowded on hi and least
			// present on lo.
			var pick Unit
			found := false
			for _, u := range units {
				if out.Assigned[u] != hi || (u.Task >= 0) != tasks {
					continue
				}
				if !found || cmp.Or(cmp.Compare(same(lo, u.Connector)-same(hi, u.Connector), same(lo, pick.Connector)-same(hi, pick.Connector))) < 0 {
					pick, found = u, true
				}
			}
			if !found {
				break
			}
			out.Assigned[pick] = lo
		}
	}
	return out
}
