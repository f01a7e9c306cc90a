package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/internal/failpoint"
	"github.com/txsink/txsink/internal/verify"
)

func ciPlanOptions(seed uint64) PlanOptions {
	return PlanOptions{Seed: seed, Faults: 32, Workers: 2, GapMin: time.Second, GapMax: 3 * time.Second, SessionTimeout: 6 * time.Second}
}

// TestPlanDeterministic: the same seed gives the same schedule, another
// seed another one.
func TestPlanDeterministic(t *testing.T) {
	a, b := Plan(ciPlanOptions(42)), Plan(ciPlanOptions(42))
	if FormatPlan(a) != FormatPlan(b) {
		t.Fatalf("same seed, different schedules:\n%s\n%s", FormatPlan(a), FormatPlan(b))
	}
	if FormatPlan(a) == FormatPlan(Plan(ciPlanOptions(43))) {
		t.Fatal("seeds 42 and 43 give the same schedule")
	}
	t.Logf("seed 42:\n%s", FormatPlan(a))
}

// TestPlanCoverage: a deck of 32 faults holds every weighted kind, every
// kill failpoint and both stop failpoints; zombies outlast the session.
func TestPlanCoverage(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		plan := Plan(ciPlanOptions(seed))
		if len(plan) != 32 {
			t.Fatalf("seed %d: %d faults, want 32", seed, len(plan))
		}
		kinds := map[Kind]int{}
		points := map[string]bool{}
		for i, f := range plan {
			kinds[f.Kind]++
			if f.Seq != i+1 || (i > 0 && f.At <= plan[i-1].At) {
				t.Fatalf("seed %d: fault %v out of order", seed, f)
			}
			if f.Worker < 0 || f.Worker > 1 {
				t.Fatalf("seed %d: worker %d", seed, f.Worker)
			}
			if f.Kind == FailpointKill {
				points[f.Point] = true
			}
			if (f.Kind == Zombie || f.Kind == ZombieFailpoint) && f.Hold <= 6*time.Second {
				t.Fatalf("seed %d: zombie hold %v not past the session timeout", seed, f.Hold)
			}
		}
		for k, w := range DefaultWeights {
			if kinds[k] != w {
				t.Fatalf("seed %d: %d faults of kind %s, want %d", seed, kinds[k], k, w)
			}
		}
		if len(points) != len(killPoints) {
			t.Fatalf("seed %d: failpoints %v, want all of %v", seed, points, killPoints)
		}
	}
}

func TestPlanDuration(t *testing.T) {
	o := ciPlanOptions(7)
	o.Faults, o.Duration = 0, 10*time.Minute
	plan := Plan(o)
	if len(plan) < 200 || plan[len(plan)-1].At > o.Duration {
		t.Fatalf("%d faults, last at %v", len(plan), plan[len(plan)-1].At)
	}
}

func TestPointFor(t *testing.T) {
	for _, c := range []struct{ mode, in, want string }{
		{"exactly_once", failpoint.AfterDecide, failpoint.AfterDecide},
		{"at_least_once", failpoint.AfterDecide, failpoint.AfterWrite},
		{"exactly_once_sink", failpoint.AfterPoll, failpoint.AfterPoll},
		{"exactly_once_sink", failpoint.AfterPrepare, failpoint.AfterWrite},
	} {
		if got := pointFor(SinkPostgres, c.mode, c.in); got != c.want {
			t.Errorf("pointFor(%s, %s) = %s, want %s", c.mode, c.in, got, c.want)
		}
	}
}

// TestRecoveries: a recovery ends at the first sample covering the
// frontier acknowledged when the fault healed; one that runs past the next
// fault's start is counted as overlapped; one never reached as never.
func TestRecoveries(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var samples []verify.OffsetSample
	for i, next := range []int64{5, 8, 12, 20, 20} {
		for p := int32(0); p < 2; p++ {
			samples = append(samples, verify.OffsetSample{At: at(float64(i)), Partition: p, Next: next})
		}
	}
	heals := []heal{
		{kind: KillWorker, at: at(0.5), next: at(3.5), frontier: map[int32]int64{0: 10, 1: 12}}, // covered at 2s
		{kind: KillWorker, at: at(1), next: at(1.5), frontier: map[int32]int64{0: 20}},          // at 3s, after the next fault
		{kind: Zombie, at: at(3.5), frontier: map[int32]int64{0: 21}},                           // never
	}
	r := recoveries(samples, heals)
	k := r[KillWorker]
	if len(k.Times) != 2 || k.Times[0] != 1500*time.Millisecond || k.Times[1] != 2*time.Second || k.Overlapped != 1 {
		t.Fatalf("kill: %+v", k)
	}
	if z := r[Zombie]; z.NotRecovered != 1 || len(z.Times) != 0 {
		t.Fatalf("zombie: %+v", z)
	}
	if k.Median() != 2*time.Second || k.Max() != 2*time.Second {
		t.Fatalf("median %v max %v", k.Median(), k.Max())
	}
}

// TestPlanThen: a profile's aimed faults follow the drawn schedule in
// order, numbered and timed after it, and read as what they aim at.
func TestPlanThen(t *testing.T) {
	p := Profile{Name: "t", Seed: 7, Faults: 5, Workers: 3, Partitions: 6, GapMin: time.Second, GapMax: 2 * time.Second,
		Lanes: []Lane{{Name: "alo", Delivery: "at_least_once"}}, Env: Env{Bootstrap: "127.0.0.1:9", Binary: "txsink", Dir: t.TempDir(), NewDatabase: func(string) (string, error) { return "", nil }},
		Then: []Fault{
			{Kind: LaneFailpoint, Lanes: []string{"alo"}, Point: failpoint.AfterWrite, Hit: 1},
			{Kind: LaneZombie, Lanes: []string{"alo"}, Point: failpoint.AfterPoll, Hit: 2, Hold: 16 * time.Second},
		}}
	plan, err := PlanOf(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 7 {
		t.Fatalf("%d faults, want 5 drawn and 2 aimed:\n%s", len(plan), FormatPlan(plan))
	}
	for i, f := range plan {
		if f.Seq != i+1 || (i > 0 && f.At <= plan[i-1].At) {
			t.Errorf("fault %d out of order: %s", i, f)
		}
	}
	if got, want := plan[5].String(), "lane-failpoint after-write:1 lanes=alo"; !strings.HasSuffix(got, want) {
		t.Errorf("aimed kill reads %q, want ...%q", got, want)
	}
	if got, want := plan[6].String(), "lane-zombie after-poll:2:stop hold=16s lanes=alo"; !strings.HasSuffix(got, want) {
		t.Errorf("aimed zombie reads %q, want ...%q", got, want)
	}
	if p.Then[0].Seq != 0 {
		t.Error("PlanOf changed the profile's Then")
	}
}

// TestMovedPast: a zombie is continued only once every partition's
// stored offset moved past its value at the freeze.
func TestMovedPast(t *testing.T) {
	at := func(next ...int64) []verify.OffsetSample {
		var out []verify.OffsetSample
		for p, n := range next {
			out = append(out, verify.OffsetSample{Partition: int32(p), Next: n})
		}
		return out
	}
	for _, c := range []struct {
		before, now []verify.OffsetSample
		want        bool
	}{
		{at(10, 20), at(11, 21), true},
		{at(10, 20), at(11, 20), false}, // partition 1 not written past
		{at(10, 20), at(11), false},     // partition 1 not read
		{nil, at(1), false},             // nothing known at the freeze
	} {
		if got := movedPast(c.before, c.now); got != c.want {
			t.Errorf("movedPast(%v, %v) = %v, want %v", c.before, c.now, got, c.want)
		}
	}
}
