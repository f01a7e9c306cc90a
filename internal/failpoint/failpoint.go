// Package failpoint kills the process at named points of the commit
// protocol, for crash tests. It is inert unless the TXSINK_FAILPOINT
// environment variable is set, as "name", "name:N" (SIGKILL at the N-th hit,
// default 1) or "name:N:stop" (SIGSTOP instead: the process freezes there,
// as a zombie, until someone sends SIGCONT), several separated by commas.
//
// A name may be scoped to one connector, "name@connector:N": then only
// that connector's passes through the point count (the sites that know
// their connector call HitIn). A process that runs many connectors — a
// worker of a cluster — can so be hit in one connector's window.
//
// When TXSINK_FAILPOINT_FILE names a file, SIGUSR1 re-arms the process
// with the spec that file holds (counts start again; an empty file
// disarms): a test arms a running worker in place, without the restart
// that would move its tasks.
package failpoint

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env is the environment variable read at start.
const Env = "TXSINK_FAILPOINT"

// FileEnv names the file SIGUSR1 re-arms from.
const FileEnv = "TXSINK_FAILPOINT_FILE"

// Names of the points the runtime and the sinks hit.
const (
	AfterPoll    = "after-poll"
	AfterWrite   = "after-write"   // rows written, before PREPARE (or before the local COMMIT)
	AfterPrepare = "after-prepare" // every batch of the round prepared
	AfterDecide  = "after-decide"  // the Kafka decision is durable (to commit or to abort)
	// AfterDecideCommit is after-decide counting only decisions to
	// commit (two-phase rounds): a zombie stopped here has rows to write
	// that a new owner also writes.
	AfterDecideCommit = "after-decide-commit"
	AfterCommit       = "after-commit" // COMMIT PREPARED done
	// InFence is inside the fence bump of an assignment, with the
	// offsets rows locked and the transaction open.
	InFence = "in-fence"
	// AheadBeforeDecide (pipelined rounds): round N is prepared and not
	// decided, round N+1 is written ahead (open transactions, not
	// prepared).
	AheadBeforeDecide = "ahead-before-decide"
	// AheadAfterCommit (pipelined rounds): round N is decided and
	// committed, round N+1 is written ahead and not prepared yet.
	AheadAfterCommit = "ahead-after-commit"
	// BeforeWrite (local rounds: exactly_once_sink, at_least_once,
	// at_most_once): the round's batches were checked as still owned and
	// continuing their partitions, nothing of them is committed yet. A
	// zombie stopped here has passed every ownership check the task makes;
	// only the sink's fence stands between its write and the new owner's.
	BeforeWrite = "before-write"
)

var (
	mu     sync.Mutex
	armed  map[key]point
	counts map[key]int
)

// key is a point's name and the connector it is scoped to ("" for any).
type key struct{ name, connector string }

type point struct {
	n    int
	stop bool
}

func init() {
	arm(os.Getenv(Env))
	if file := os.Getenv(FileEnv); file != "" {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGUSR1)
		go func() {
			for range ch {
				if b, err := os.ReadFile(file); err == nil {
					arm(string(b))
				}
			}
		}()
	}
}

// arm replaces the armed points with spec's and starts the counts again.
func arm(spec string) {
	a := map[key]point{}
	for _, item := range strings.Split(spec, ",") {
		f := strings.Split(strings.TrimSpace(item), ":")
		if f[0] == "" {
			continue
		}
		k := key{name: f[0]}
		if i := strings.IndexByte(f[0], '@'); i >= 0 {
			k = key{name: f[0][:i], connector: f[0][i+1:]}
		}
		p := point{n: 1}
		if len(f) > 1 {
			if v, err := strconv.Atoi(f[1]); err == nil && v > 0 {
				p.n = v
			}
		}
		p.stop = len(f) > 2 && f[2] == "stop"
		a[k] = p
	}
	mu.Lock()
	armed, counts = a, map[key]int{}
	mu.Unlock()
}

// Armed reports whether the named point is armed, for any connector (for
// the runtime to reach a point's state deterministically only when a test
// asks for it).
func Armed(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	for k := range armed {
		if k.name == name {
			return true
		}
	}
	return false
}

// Enabled reports whether any failpoint is armed.
func Enabled() bool {
	mu.Lock()
	defer mu.Unlock()
	return len(armed) > 0
}

// Hit counts a pass through the named point by a site that does not know
// its connector: only points armed for any connector count it.
func Hit(name string) { HitIn("", name) }

// HitIn counts a pass of the connector through the named point and, when
// a point armed for it (or for any connector) reaches its count, sends
// SIGKILL (never returns) or SIGSTOP (returns once the process is
// continued) to the process.
func HitIn(connector, name string) {
	// Called per round in production, where nothing is armed: no
	// allocation, one uncontended lock.
	keys := [2]key{{name: name}, {name: name, connector: connector}}
	n := 1
	if connector != "" {
		n = 2
	}
	mu.Lock()
	fire, stop := false, false
	for _, k := range keys[:n] {
		if pt, ok := armed[k]; ok {
			counts[k]++
			if counts[k] == pt.n {
				fire, stop = true, pt.stop
			}
		}
	}
	mu.Unlock()
	if fire && stop {
		// A process-directed SIGSTOP stops the process when the kernel
		// gets to it, not when kill returns: on a loaded machine the
		// caller would run on past the point (begin a transaction, lock
		// a row) before the process stops. So the caller waits for the
		// SIGCONT that ends the freeze: nothing after the point runs
		// before the resume.
		cont := make(chan os.Signal, 1)
		signal.Notify(cont, syscall.SIGCONT)
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		<-cont
		signal.Stop(cont)
		return // resumed by SIGCONT: carry on as a zombie would
	}
	if fire {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; never return
	}
}
