package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
)

// RootLogger is the name of the root logger (as in log4j).
const RootLogger = "root"

// Levels holds named, hierarchical log levels for slog loggers, the model
// behind /admin/loggers: a logger "txsink.connectors.orders" takes the
// level of the nearest ancestor ("txsink.connectors", "txsink", root) that
// has one set. Setting a level on a name sets it on every known
// descendant too, as Kafka Connect does.
type Levels struct {
	mu    sync.RWMutex
	set   map[string]slog.Level // explicitly set levels
	mod   map[string]time.Time  // when each was set through the API
	known map[string]bool       // names loggers were created for
	added int                   // names Set added (not created by Logger)
}

// MaxAddedLoggers bounds how many names Set adds beyond those of the
// worker's loggers, so that PUT /admin/loggers cannot grow the worker's
// memory without end.
const MaxAddedLoggers = 256

// ErrTooManyLoggers is returned by Set when it would add a name beyond
// MaxAddedLoggers.
var ErrTooManyLoggers = errors.New("too many loggers")

// loggerNameRE is what a logger name set through the API may look like.
var loggerNameRE = regexp.MustCompile(`^[A-Za-z0-9_$.-]{1,255}$`)

// NewLevels returns levels with root at root.
func NewLevels(root slog.Level) *Levels {
	return &Levels{
		set:   map[string]slog.Level{RootLogger: root},
		mod:   map[string]time.Time{},
		known: map[string]bool{RootLogger: true},
	}
}

// Logger returns a logger named name that writes through h when the
// name's effective level allows. h should accept every level.
func (l *Levels) Logger(h slog.Handler, name string) *slog.Logger {
	l.mu.Lock()
	l.known[name] = true
	l.mu.Unlock()
	return slog.New(&levelHandler{inner: h, levels: l, name: name})
}

// Effective returns the level that applies to name.
func (l *Levels) Effective(name string) slog.Level {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.effectiveLocked(name)
}

func (l *Levels) effectiveLocked(name string) slog.Level {
	for n := name; ; {
		if lv, ok := l.set[n]; ok {
			return lv
		}
		i := strings.LastIndexByte(n, '.')
		if i < 0 {
			return l.set[RootLogger]
		}
		n = n[:i]
	}
}

// Set sets the level of name and of every known logger below it, and
// returns the names it changed, sorted. A name no logger has yet is added
// (as log4j does), up to MaxAddedLoggers of them (ErrTooManyLoggers).
func (l *Levels) Set(name string, lv slog.Level) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.known[name] {
		if l.added >= MaxAddedLoggers {
			return nil, fmt.Errorf("%w: %d names were added already", ErrTooManyLoggers, l.added)
		}
		l.added++
	}
	now := time.Now()
	changed := []string{name}
	l.set[name], l.mod[name] = lv, now
	l.known[name] = true
	for n := range l.known {
		if n != name && (name == RootLogger || strings.HasPrefix(n, name+".")) {
			l.set[n], l.mod[n] = lv, now
			changed = append(changed, n)
		}
	}
	sort.Strings(changed)
	return changed, nil
}

// entry returns a logger's level and modification time; ok is false for
// an unknown name.
func (l *Levels) entry(name string) (loggerLevel, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if !l.known[name] {
		return loggerLevel{}, false
	}
	e := loggerLevel{Level: levelName(l.effectiveLocked(name))}
	if t, ok := l.mod[name]; ok {
		ms := t.UnixMilli()
		e.LastModified = &ms
	}
	return e, true
}

func (l *Levels) names() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []string
	for n := range l.known {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// levelHandler filters records by the named logger's effective level.
type levelHandler struct {
	inner  slog.Handler
	levels *Levels
	name   string
}

func (h *levelHandler) Enabled(ctx context.Context, lv slog.Level) bool {
	return lv >= h.levels.Effective(h.name) && h.inner.Enabled(ctx, lv)
}

func (h *levelHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.inner.Handle(ctx, r)
}

func (h *levelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &levelHandler{inner: h.inner.WithAttrs(as), levels: h.levels, name: h.name}
}

func (h *levelHandler) WithGroup(g string) slog.Handler {
	return &levelHandler{inner: h.inner.WithGroup(g), levels: h.levels, name: h.name}
}

// Log4j level names and their slog levels.
const (
	LevelTrace = slog.LevelDebug - 4
	LevelFatal = slog.LevelError + 4
	LevelOff   = slog.Level(1 << 20)
)

// ParseLevel accepts log4j's names (TRACE, DEBUG, INFO, WARN, ERROR,
// FATAL, OFF; any case) and WARNING.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "TRACE":
		return LevelTrace, nil
	case "DEBUG":
		return slog.LevelDebug, nil
	case "INFO":
		return slog.LevelInfo, nil
	case "WARN", "WARNING":
		return slog.LevelWarn, nil
	case "ERROR":
		return slog.LevelError, nil
	case "FATAL":
		return LevelFatal, nil
	case "OFF":
		return LevelOff, nil
	}
	return 0, fmt.Errorf("invalid log level %q", s)
}

func levelName(lv slog.Level) string {
	switch {
	case lv >= LevelOff:
		return "OFF"
	case lv >= LevelFatal:
		return "FATAL"
	case lv >= slog.LevelError:
		return "ERROR"
	case lv >= slog.LevelWarn:
		return "WARN"
	case lv >= slog.LevelInfo:
		return "INFO"
	case lv >= slog.LevelDebug:
		return "DEBUG"
	}
	return "TRACE"
}

// loggersResource serves /admin/loggers.
type loggersResource struct{ levels *Levels }

// Routes returns the /admin/loggers router.
func (rs loggersResource) Routes() chi.Router {
	r := chi.NewRouter()
	r.Get("/", rs.list)
	r.Get("/{logger}", rs.get)
	r.Put("/{logger}", rs.put)
	return r
}

// list is GET /admin/loggers.
func (rs loggersResource) list(w http.ResponseWriter, r *http.Request) {
	out := map[string]loggerLevel{}
	for _, n := range rs.levels.names() {
		if e, ok := rs.levels.entry(n); ok {
			out[n] = e
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// get is GET /admin/loggers/{logger}.
func (rs loggersResource) get(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "logger")
	e, ok := rs.levels.entry(name)
	if !ok {
		writeError(w, http.StatusNotFound, "Logger "+name+" not found.")
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// put is PUT /admin/loggers/{logger}[?scope=worker|cluster] with
// {"level": "DEBUG"}: 200 with the changed loggers, or 204 for
// scope=cluster (a standalone worker is the whole cluster).
func (rs loggersResource) put(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "logger")
	var body map[string]string
	if err := decode(r, &body); err != nil {
		var ae *apiError
		if ok := asAPIError(err, &ae); ok {
			writeError(w, ae.code, ae.msg)
			return
		}
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	lvName, ok := body["level"]
	if !ok {
		writeError(w, http.StatusBadRequest, "Desired 'level' parameter was not specified in request.")
		return
	}
	lv, err := ParseLevel(lvName)
	if err != nil {
		writeError(w, http.StatusBadRequest, "Invalid log level '"+lvName+"'.")
		return
	}
	scope := strings.ToLower(r.URL.Query().Get("scope"))
	if scope != "" && scope != "worker" && scope != "cluster" {
		writeError(w, http.StatusBadRequest, "Invalid scope '"+r.URL.Query().Get("scope")+"'; must be one of 'worker' or 'cluster'.")
		return
	}
	if !loggerNameRE.MatchString(name) {
		writeError(w, http.StatusBadRequest, "Invalid logger name: use 1 to 255 letters, digits, '.', '_', '$' or '-'.")
		return
	}
	changed, err := rs.levels.Set(name, lv)
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("Logger %s not created: %v (at most %d names may be added through the API)", name, err, MaxAddedLoggers))
		return
	}
	if scope == "cluster" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, changed)
}

func asAPIError(err error, target **apiError) bool {
	ae, ok := err.(*apiError)
	if ok {
		*target = ae
	}
	return ok
}
