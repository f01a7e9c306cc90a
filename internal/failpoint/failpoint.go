// Package failpoint kills the process at named points of the commit
// protocol, for crash tests. It is inert unless the TXSINK_FAILPOINT
// environment variable is set, as "name", "name:N" (SIGKILL at the N-th hit,
// default 1) or "name:N:stop" (SIGSTOP instead: the process freezes there,
// as a zombie, until someone sends SIGCONT), several separated by commas.
package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env is the environment variable read at start.
const Env = "TXSINK_FAILPOINT"

// Names of the points the runtime and the sinks hit.
const (
	AfterPoll    = "after-poll"
	AfterWrite   = "after-write"   // rows written, before PREPARE (or before the local COMMIT)
	AfterPrepare = "after-prepare" // every batch of the round prepared
	AfterDecide  = "after-decide"  // the Kafka decision is durable
	AfterCommit  = "after-commit"  // COMMIT PREPARED done
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
)

// Armed reports whether the named point is armed (for the runtime to
// reach a point's state deterministically only when a test asks for it).
func Armed(name string) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := armed[name]
	return ok
}

var (
	mu     sync.Mutex
	armed  map[string]point
	counts = map[string]int{}
)

func init() { arm(os.Getenv(Env)) }

type point struct {
	n    int
	stop bool
}

func arm(spec string) {
	armed = map[string]point{}
	for _, item := range strings.Split(spec, ",") {
		f := strings.Split(strings.TrimSpace(item), ":")
		if f[0] == "" {
			continue
		}
		p := point{n: 1}
		if len(f) > 1 {
			if v, err := strconv.Atoi(f[1]); err == nil && v > 0 {
				p.n = v
			}
		}
		p.stop = len(f) > 2 && f[2] == "stop"
		armed[f[0]] = p
	}
}

// Enabled reports whether any failpoint is armed.
func Enabled() bool {
	mu.Lock()
	defer mu.Unlock()
	return len(armed) > 0
}

// Hit counts a hit of the named point and, when the point is armed and its
// count is reached, sends SIGKILL (never returns) or SIGSTOP (returns once
// the process is continued) to the process.
func Hit(name string) {
	mu.Lock()
	pt, ok := armed[name]
	if !ok {
		mu.Unlock()
		return
	}
	counts[name]++
	fire := counts[name] == pt.n
	mu.Unlock()
	if fire && pt.stop {
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		return // resumed by SIGCONT: carry on as a zombie would
	}
	if fire {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; never return
	}
}
