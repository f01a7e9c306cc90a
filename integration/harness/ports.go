package harness

// Host ports for containers. A port the harness hands out is bound by
// Docker only later, so two things can take it meanwhile: another test
// process of the same run (CI runs three lanes at once) handing out the
// same port, and any socket's ephemeral local port (every client
// connection takes one). Both happened: a clean-clone CI run failed with
// "bind: address already in use" on a Kafka container and a PostgreSQL
// container of another lane answering on the same port. So ports come
// from below the kernel's ephemeral range, which connections never use,
// and every process records the ports it hands out in a file shared under
// an exclusive lock; a port handed out in the last ten minutes is not
// handed out again.

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// portLedger is the file of handed-out ports ("port unix-seconds" lines).
var portLedger = filepath.Join(os.TempDir(), "txsink-harness-ports")

const portHold = 10 * time.Minute

// freePort returns a port on 127.0.0.1 that is free now, below the
// ephemeral range, and not handed out by any harness process in the last
// ten minutes. Without such a range (or the ledger) it falls back to an
// ephemeral port.
func freePort() (int, error) {
	lo := ephemeralLow()
	const base = 10000
	if lo-base < 1000 {
		return ephemeralPort()
	}
	f, err := os.OpenFile(portLedger, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return ephemeralPort()
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return ephemeralPort()
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	now := time.Now()
	held := map[int]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p, at, ok := strings.Cut(sc.Text(), " ")
		port, err1 := strconv.Atoi(p)
		sec, err2 := strconv.ParseInt(at, 10, 64)
		if ok && err1 == nil && err2 == nil && now.Sub(time.Unix(sec, 0)) < portHold {
			held[port] = sec
		}
	}
	for range 200 {
		port := base + rand.IntN(lo-base)
		if _, taken := held[port]; taken {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		held[port] = now.Unix()
		// Rewrite the ledger with the ports still held.
		var b strings.Builder
		for p, sec := range held {
			fmt.Fprintf(&b, "%d %d\n", p, sec)
		}
		if err := f.Truncate(0); err == nil {
			_, _ = f.WriteAt([]byte(b.String()), 0)
		}
		return port, nil
	}
	return ephemeralPort()
}

// ephemeralLow is the low end of the kernel's ephemeral port range (0
// when unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

func ephemeralPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreePort is freePort for the tests' own processes (a txsink worker, a
// Connect worker) that bind a port handed to them.
func FreePort() (int, error) { return freePort() }
