package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/offsets"
)

// connectorsResource serves /connectors.
type connectorsResource struct{ s *Server }

// Routes returns the /connectors router.
func (rs connectorsResource) Routes() chi.Router {
	r := chi.NewRouter()
	r.Use(rs.s.forwarding)
	r.Get("/", rs.list)
	r.Post("/", rs.create)
	r.Route("/{name}", func(r chi.Router) {
		r.Get("/", rs.get)
		r.Delete("/", rs.delete)
		r.Get("/config", rs.getConfig)
		r.Put("/config", rs.putConfig)
		r.Patch("/config", rs.patchConfig)
		r.Get("/status", rs.status)
		r.Post("/restart", rs.restart)
		r.Put("/pause", rs.pause)
		r.Put("/resume", rs.resume)
		r.Put("/stop", rs.stop)
		r.Get("/tasks", rs.tasks)
		r.Get("/tasks/{task}/status", rs.taskStatus)
		r.Post("/tasks/{task}/restart", rs.restartTask)
		r.Get("/topics", rs.topics)
		r.Put("/topics/reset", rs.resetTopics)
		r.Get("/offsets", rs.offsets)
		r.Patch("/offsets", rs.alterOffsets)
		r.Delete("/offsets", rs.resetOffsets)
	})
	return r
}

func (rs connectorsResource) reg() *connectors.Registry { return rs.s.h.Registry() }

// version is the plugin version of a connector ("" when it is gone).
func (rs connectorsResource) version(ctx context.Context, name string) string {
	inf, err := rs.s.h.Info(ctx, name)
	if err != nil {
		return ""
	}
	return pluginVersion(rs.reg(), inf.Config)
}

// list is GET /connectors[?expand=status&expand=info].
func (rs connectorsResource) list(w http.ResponseWriter, r *http.Request) {
	names, err := rs.s.h.Connectors(r.Context())
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	if names == nil {
		names = []string{}
	}
	expand := r.URL.Query()["expand"]
	if len(expand) == 0 {
		writeJSON(w, http.StatusOK, names)
		return
	}
	out := map[string]map[string]any{}
	for _, n := range names {
		e := map[string]any{}
		ok := true
		for _, x := range expand {
			switch x {
			case "status":
				st, err := rs.s.h.Status(r.Context(), n)
				if err != nil {
					ok = false
					continue
				}
				cs := toStatus(rs.s.scrubStatus(st, nil), rs.version(r.Context(), n))
				rs.s.withPeers(r, n, &cs)
				e["status"] = cs
			case "info":
				inf, err := rs.s.h.Info(r.Context(), n)
				if err != nil {
					ok = false
					continue
				}
				e["info"] = toInfo(rs.reg(), inf)
			}
		}
		if ok { // deleted meanwhile: left out, as Connect does
			out[n] = e
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// create is POST /connectors.
func (rs connectorsResource) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := decode(r, &req); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	secs := secrets.Of(rs.reg(), req.Config)
	name := ""
	if req.Name != nil {
		name = strings.TrimSpace(*req.Name)
	}
	if req.Config == nil {
		rs.s.handleErr(w, badRequest("Connector config is required: the body must be {\"name\": …, \"config\": {…}}"), secs)
		return
	}
	if name == "" {
		name = strings.TrimSpace(req.Config[config.KeyName])
	}
	if name == "" {
		rs.s.handleErr(w, badRequest("Connector name is required"), secs)
		return
	}
	if err := config.CheckName(name); err != nil {
		rs.s.handleErr(w, badRequest("%s", err.Error()), secs)
		return
	}
	initial := ""
	if req.InitialState != nil {
		initial = *req.InitialState
	}
	// Case-insensitive, as Connect's InitialState.forValue.
	target, err := engine.ParseTargetState(strings.ToUpper(initial))
	if err != nil {
		rs.s.handleErr(w, badRequest("initial_state must be RUNNING, PAUSED or STOPPED, got %q", initial), secs)
		return
	}
	inf, err := rs.s.h.Create(r.Context(), name, req.Config, target)
	if err != nil {
		rs.s.handleErr(w, err, secs)
		return
	}
	w.Header().Set("Location", location(r, name))
	writeJSON(w, http.StatusCreated, toInfo(rs.reg(), inf))
}

// location is the absolute URL of a connector, from the scheme and Host
// the request reached the worker with (as Connect's JAX-RS
// Response.created builds it).
func location(r *http.Request, name string) string {
	u := url.URL{Scheme: "http", Host: r.Host, Path: "/connectors/" + name}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	return u.String()
}

// get is GET /connectors/{name}.
func (rs connectorsResource) get(w http.ResponseWriter, r *http.Request) {
	inf, err := rs.s.h.Info(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, toInfo(rs.reg(), inf))
}

// delete is DELETE /connectors/{name}: 204.
func (rs connectorsResource) delete(w http.ResponseWriter, r *http.Request) {
	if err := rs.s.h.Delete(r.Context(), chi.URLParam(r, "name")); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getConfig is GET /connectors/{name}/config.
func (rs connectorsResource) getConfig(w http.ResponseWriter, r *http.Request) {
	inf, err := rs.s.h.Info(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, secrets.RedactConfig(rs.reg(), inf.Config))
}

// putConfig is PUT /connectors/{name}/config: 201 when created, 200 when
// updated.
func (rs connectorsResource) putConfig(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	var cfg settings
	if err := decode(r, &cfg); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	secs := secrets.Of(rs.reg(), cfg)
	if cfg == nil {
		rs.s.handleErr(w, badRequest("Connector config is required"), secs)
		return
	}
	if err := config.CheckName(name); err != nil {
		rs.s.handleErr(w, badRequest("%s", err.Error()), secs)
		return
	}
	inf, created, err := rs.s.h.PutConfig(r.Context(), name, cfg)
	if err != nil {
		rs.s.handleErr(w, err, secs)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
		w.Header().Set("Location", location(r, name))
	}
	writeJSON(w, code, toInfo(rs.reg(), inf))
}

// patchConfig is PATCH /connectors/{name}/config (Connect 3.8+): null
// removes a setting.
func (rs connectorsResource) patchConfig(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	var patch patchSettings
	if err := decode(r, &patch); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	flat := map[string]string{}
	for k, v := range patch {
		if v != nil {
			flat[k] = *v
		}
	}
	secs := secrets.Of(rs.reg(), flat)
	if n, ok := patch[config.KeyName]; ok && (n == nil || *n != name) {
		shown := "null"
		if n != nil {
			shown = *n
		}
		rs.s.handleErr(w, badRequest("Connector name configuration (%s) doesn't match connector name in the URL (%s)", shown, name), secs)
		return
	}
	// "[hidden]" sent back for a secret keeps the stored one while the
	// connector's host, port and user stay (Standalone.PatchConfig).
	inf, err := rs.s.h.PatchConfig(r.Context(), name, patch)
	if err != nil {
		rs.s.handleErr(w, err, secs)
		return
	}
	writeJSON(w, http.StatusOK, toInfo(rs.reg(), inf))
}

// status is GET /connectors/{name}/status.
func (rs connectorsResource) status(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	st, err := rs.s.h.Status(r.Context(), name)
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	out := toStatus(rs.s.scrubStatus(st, nil), rs.version(r.Context(), st.Name))
	rs.s.withPeers(r, name, &out)
	writeJSON(w, http.StatusOK, out)
}

// restart is POST /connectors/{name}/restart?includeTasks=&onlyFailed=:
// 204 for a plain connector restart, else 202 with the status.
func (rs connectorsResource) restart(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	includeTasks, err := boolParam(r, "includeTasks")
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	onlyFailed, err := boolParam(r, "onlyFailed")
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	st, err := rs.s.h.Restart(r.Context(), name, includeTasks, onlyFailed)
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	if !includeTasks && !onlyFailed {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusAccepted, toStatus(rs.s.scrubStatus(st, nil), rs.version(r.Context(), name)))
}

func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, badRequest("Query parameter %s must be true or false, got %q", name, v)
	}
	return b, nil
}

// pause is PUT /connectors/{name}/pause: 202.
func (rs connectorsResource) pause(w http.ResponseWriter, r *http.Request) {
	rs.lifecycle(w, r, rs.s.h.Pause, http.StatusAccepted)
}

// resume is PUT /connectors/{name}/resume: 202.
func (rs connectorsResource) resume(w http.ResponseWriter, r *http.Request) {
	rs.lifecycle(w, r, rs.s.h.Resume, http.StatusAccepted)
}

// stop is PUT /connectors/{name}/stop: 204.
func (rs connectorsResource) stop(w http.ResponseWriter, r *http.Request) {
	rs.lifecycle(w, r, rs.s.h.Stop, http.StatusNoContent)
}

func (rs connectorsResource) lifecycle(w http.ResponseWriter, r *http.Request, op func(ctx context.Context, name string) error, code int) {
	if err := op(r.Context(), chi.URLParam(r, "name")); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	w.WriteHeader(code)
}

// tasks is GET /connectors/{name}/tasks.
func (rs connectorsResource) tasks(w http.ResponseWriter, r *http.Request) {
	inf, err := rs.s.h.Info(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	cfg := secrets.RedactConfig(rs.reg(), inf.Config)
	out := []taskInfo{}
	for _, t := range inf.Tasks {
		out = append(out, taskInfo{ID: taskID{Connector: inf.Name, Task: t}, Config: cfg})
	}
	writeJSON(w, http.StatusOK, out)
}

func taskParam(r *http.Request) (int, bool) {
	id, err := strconv.Atoi(chi.URLParam(r, "task"))
	return id, err == nil && id >= 0
}

// taskStatus is GET /connectors/{name}/tasks/{task}/status.
func (rs connectorsResource) taskStatus(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	id, ok := taskParam(r)
	if !ok {
		writeError(w, http.StatusNotFound, "HTTP 404 Not Found")
		return
	}
	st, err := rs.s.h.Status(r.Context(), name)
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	out := toStatus(rs.s.scrubStatus(st, nil), rs.version(r.Context(), name))
	rs.s.withPeers(r, name, &out)
	for _, t := range out.Tasks {
		if t.ID == id {
			writeJSON(w, http.StatusOK, t)
			return
		}
	}
	rs.s.handleErr(w, &apiError{code: http.StatusNotFound, msg: fmt.Sprintf("No status found for task %s-%d", name, id)}, nil)
}

// restartTask is POST /connectors/{name}/tasks/{task}/restart: 204.
func (rs connectorsResource) restartTask(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	id, ok := taskParam(r)
	if !ok {
		writeError(w, http.StatusNotFound, "HTTP 404 Not Found")
		return
	}
	if err := rs.s.h.RestartTask(r.Context(), name, id); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// topics is GET /connectors/{name}/topics: Connect's active topics,
// {"<name>": {"topics": [...]}}.
func (rs connectorsResource) topics(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	ts, err := rs.s.h.ActiveTopics(r.Context(), name)
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	if ts == nil {
		ts = []string{}
	}
	secs := rs.s.h.Secrets()
	for i, t := range ts {
		ts[i] = secrets.ScrubString(t, secs) // a topic named by a config provider reference
	}
	writeJSON(w, http.StatusOK, map[string]activeTopics{name: {Topics: ts}})
}

// resetTopics is PUT /connectors/{name}/topics/reset: 202, no body.
func (rs connectorsResource) resetTopics(w http.ResponseWriter, r *http.Request) {
	if err := rs.s.h.ResetActiveTopics(r.Context(), chi.URLParam(r, "name")); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// offsets is GET /connectors/{name}/offsets: the offsets stored in the sink.
func (rs connectorsResource) offsets(w http.ResponseWriter, r *http.Request) {
	ps, err := rs.s.h.Offsets(r.Context(), chi.URLParam(r, "name"))
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, toOffsets(ps))
}

// alterOffsets is PATCH /connectors/{name}/offsets.
func (rs connectorsResource) alterOffsets(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	var body struct {
		Offsets []json.RawMessage `json:"offsets"`
	}
	if err := decode(r, &body); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	ps, err := ParseSinkOffsets(body.Offsets)
	if err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	if _, err := rs.s.h.Info(r.Context(), name); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	if err := rs.s.h.AlterOffsets(r.Context(), name, ps); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, messageBody{Message: "The offsets for this connector have been altered successfully"})
}

// resetOffsets is DELETE /connectors/{name}/offsets.
func (rs connectorsResource) resetOffsets(w http.ResponseWriter, r *http.Request) {
	if err := rs.s.h.ResetOffsets(r.Context(), chi.URLParam(r, "name")); err != nil {
		rs.s.handleErr(w, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, messageBody{Message: "The offsets for this connector have been reset successfully"})
}

// ParseSinkOffsets parses the "offsets" list of a PATCH …/offsets body in
// Kafka Connect's sink shape:
//
//	{"partition": {"kafka_topic": "t", "kafka_partition": 0}, "offset": {"kafka_offset": 42}}
//
// A null offset clears the partition's stored offset (offsets.Unset).
// Messages follow Connect's.
func ParseSinkOffsets(raw []json.RawMessage) ([]offsets.Position, error) {
	if len(raw) == 0 {
		return nil, badRequest("Partitions / offsets need to be provided for an alter offsets request")
	}
	var out []offsets.Position
	seen := map[string]bool{}
	for _, item := range raw {
		var e struct {
			Partition map[string]json.RawMessage `json:"partition"`
			Offset    map[string]json.RawMessage `json:"offset"`
		}
		if err := json.Unmarshal(item, &e); err != nil {
			return nil, badRequest("Each offset must be an object with \"partition\" and \"offset\": %s", jsonErrorText(err))
		}
		if e.Partition == nil {
			return nil, badRequest("The partition for a sink connector offset cannot be null or missing")
		}
		rt, okT := e.Partition["kafka_topic"]
		rp, okP := e.Partition["kafka_partition"]
		if !okT || !okP {
			return nil, badRequest("The partition for a sink connector offset must contain the keys 'kafka_topic' and 'kafka_partition'")
		}
		var topic string
		if err := json.Unmarshal(rt, &topic); err != nil || strings.TrimSpace(topic) == "" {
			return nil, badRequest("Kafka topic names must be valid strings and may not be null")
		}
		part, err := jsonInt(rp)
		if err != nil {
			return nil, badRequest("Kafka partitions must be valid numbers and may not be null")
		}
		if part < 0 || part > math.MaxInt32 {
			return nil, badRequest("Kafka partitions must be greater than or equal to 0")
		}
		p := offsets.Position{Topic: topic, Partition: int32(part), Next: offsets.Unset}
		if e.Offset != nil {
			ro, ok := e.Offset["kafka_offset"]
			if !ok {
				return nil, badRequest("The offset for a sink connector should either be null or contain the key 'kafka_offset'")
			}
			off, err := jsonInt(ro)
			if err != nil {
				return nil, badRequest("Kafka offsets must be valid numbers and may not be null")
			}
			if off < 0 {
				return nil, badRequest("Kafka offsets must be greater than or equal to 0")
			}
			p.Next = off
		}
		key := topic + "\x00" + strconv.Itoa(int(part))
		if seen[key] {
			return nil, badRequest("Partition %s-%d is listed more than once", topic, part)
		}
		seen[key] = true
		out = append(out, p)
	}
	return out, nil
}

// jsonInt reads a JSON integer, or a string holding one (Connect accepts
// both).
func jsonInt(raw json.RawMessage) (int64, error) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return strconv.ParseInt(n.String(), 10, 64)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(s), 10, 64)
}
