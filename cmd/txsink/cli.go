package main

// "txsink connectors …": a command-line client of the worker's REST API,
// which speaks Kafka Connect's dialect (/connectors, /connectors/{name}/status,
// /connectors/{name}/offsets, …). Output is a readable table by default and
// the server's JSON with -output json.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

const connectorsUsage = `usage: txsink connectors <verb> [NAME] [flags]

verbs:
  list                         connectors and their states
  get NAME                     configuration and tasks (secrets hidden)
  status NAME                  connector, task and partition states
  create -f FILE | -d JSON     create a connector from Kafka Connect's create
                               body ({"name":…,"config":{…}}) or a flat object
                               of settings; -f - reads standard input;
                               -update creates it or replaces its config
  pause NAME | resume NAME     pause or resume the connector's tasks
  stop NAME                    stop the connector (no tasks; offsets editable)
  restart NAME [-include-tasks] [-only-failed]
  delete NAME                  remove the connector (its offsets stay in the sink)
  offsets NAME                 offsets stored in the sink
  offsets NAME -set FILE       replace offsets (connector must be STOPPED);
                               FILE is {"offsets":[{"partition":{"kafka_topic":…,
                               "kafka_partition":…},"offset":{"kafka_offset":…}}]}
  offsets NAME -reset          delete the stored offsets (connector STOPPED)

flags (any verb; -flag and --flag are the same):
  -url URL          worker REST address (env TXSINK_URL; default http://127.0.0.1:8083)
  -token TOKEN      send "Authorization: Bearer TOKEN" (env TXSINK_TOKEN)
  -user USER[:PW]   HTTP basic authentication (env TXSINK_USER)
  -output FORMAT    table (default) or json
  -timeout D        give up on a request after D (default 30s)
`

// Exit codes of "txsink connectors".
const (
	exitCLIError = 1 // the request failed or the API returned an error
)

// cliOptions are the flags every verb accepts.
type cliOptions struct {
	url     string
	token   string
	user    string
	output  string
	timeout time.Duration
}

func (o *cliOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "url", envOr("TXSINK_URL", "http://127.0.0.1:8083"), "worker REST address (env TXSINK_URL)")
	fs.StringVar(&o.token, "token", os.Getenv("TXSINK_TOKEN"), "bearer token (env TXSINK_TOKEN)")
	fs.StringVar(&o.user, "user", os.Getenv("TXSINK_USER"), "basic authentication USER[:PASSWORD] (env TXSINK_USER)")
	fs.StringVar(&o.output, "output", "table", "output format: table or json")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "request timeout")
}

// cliVerb describes one verb: whether it takes a connector name and which
// flags of its own it has.
type cliVerb struct {
	needsName bool
	flags     func(fs *flag.FlagSet, v *verbFlags)
	run       func(ctx context.Context, c *restClient, name string, v *verbFlags, out io.Writer) error
}

// verbFlags holds the flags of every verb; each verb registers its own.
type verbFlags struct {
	file         string
	data         string
	update       bool
	includeTasks bool
	onlyFailed   bool
	setFile      string
	reset        bool
	json         bool // -output json
}

var cliVerbs = map[string]cliVerb{
	"list": {run: cliList},
	"get":  {needsName: true, run: cliGet},
	"status": {needsName: true, run: func(ctx context.Context, c *restClient, name string, v *verbFlags, out io.Writer) error {
		return cliShowStatus(ctx, c, http.MethodGet, "/connectors/"+url.PathEscape(name)+"/status", v, out)
	}},
	"create": {
		flags: func(fs *flag.FlagSet, v *verbFlags) {
			fs.StringVar(&v.file, "f", "", "connector file (JSON); - for standard input")
			fs.StringVar(&v.data, "d", "", "connector JSON given inline")
			fs.StringVar(&v.data, "data", "", "same as -d")
			fs.BoolVar(&v.update, "update", false, "create the connector or replace its configuration (PUT /connectors/NAME/config)")
		},
		run: cliCreate,
	},
	"pause":  {needsName: true, run: cliAction(http.MethodPut, "/pause", "Paused")},
	"resume": {needsName: true, run: cliAction(http.MethodPut, "/resume", "Resumed")},
	"stop":   {needsName: true, run: cliAction(http.MethodPut, "/stop", "Stopped")},
	"delete": {needsName: true, run: cliAction(http.MethodDelete, "", "Deleted")},
	"restart": {
		needsName: true,
		flags: func(fs *flag.FlagSet, v *verbFlags) {
			fs.BoolVar(&v.includeTasks, "include-tasks", false, "restart the tasks too")
			fs.BoolVar(&v.onlyFailed, "only-failed", false, "restart only what has FAILED")
		},
		run: cliRestart,
	},
	"offsets": {
		needsName: true,
		flags: func(fs *flag.FlagSet, v *verbFlags) {
			fs.StringVar(&v.setFile, "set", "", "replace the offsets with those in FILE (Connect's {\"offsets\":[…]} body)")
			fs.BoolVar(&v.reset, "reset", false, "delete the stored offsets")
		},
		run: cliOffsets,
	},
}

func cmdConnectors(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, connectorsUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	verbName, rest, ok := splitVerb(args)
	if !ok {
		fmt.Fprintf(stderr, "txsink connectors: no verb given\n\n%s", connectorsUsage)
		return exitUsage
	}
	verb, ok := cliVerbs[verbName]
	if !ok {
		fmt.Fprintf(stderr, "txsink connectors: unknown verb %q\n\n%s", verbName, connectorsUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("connectors "+verbName, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, connectorsUsage) }
	var o cliOptions
	o.register(fs)
	var vf verbFlags
	if verb.flags != nil {
		verb.flags(fs, &vf)
	}
	pos, err := parseInterspersed(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "txsink connectors %s: %s\n", verbName, fmt.Sprintf(format, a...))
		return exitUsage
	}
	var name string
	switch {
	case verb.needsName && len(pos) != 1:
		return usageErr("want exactly one connector name, got %d arguments", len(pos))
	case !verb.needsName && len(pos) != 0:
		return usageErr("unexpected argument %q", pos[0])
	case verb.needsName:
		name = pos[0]
	}
	switch o.output {
	case "table":
	case "json":
		vf.json = true
	default:
		return usageErr("-output must be table or json, got %q", o.output)
	}
	if verbName == "create" && (vf.file == "") == (vf.data == "") {
		return usageErr("give the connector with exactly one of -f FILE and -d JSON")
	}
	if verbName == "offsets" && vf.setFile != "" && vf.reset {
		return usageErr("-set and -reset exclude each other")
	}
	c, err := newRESTClient(o)
	if err != nil {
		return usageErr("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := verb.run(ctx, c, name, &vf, stdout); err != nil {
		fmt.Fprintf(stderr, "txsink connectors %s: %v\n", verbName, err)
		return exitCLIError
	}
	return exitOK
}

// splitVerb finds the verb among the arguments, which flags may precede
// ("connectors -url URL status NAME"), and returns the other arguments in
// their order. A flag given as "-flag value" takes the next argument when
// some verb's flag of that name takes a value.
func splitVerb(args []string) (verb string, rest []string, ok bool) {
	valued := map[string]bool{}
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	var o cliOptions
	o.register(fs)
	var vf verbFlags
	for _, v := range cliVerbs {
		if v.flags != nil {
			v.flags(fs, &vf)
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		if b, isBool := f.Value.(interface{ IsBoolFlag() bool }); !isBool || !b.IsBoolFlag() {
			valued[f.Name] = true
		}
	})
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			if a == "--" {
				return "", nil, false
			}
			return a, append(append([]string{}, args[:i]...), args[i+1:]...), true
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && valued[name] {
			i++ // its value
		}
	}
	return "", nil, false
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("restart NAME -include-tasks") and returns the positional
// ones. An argument after "--" is positional even if it starts with "-".
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		a := args[0]
		switch {
		case a == "--":
			return append(pos, args[1:]...), nil
		case len(a) > 1 && a[0] == '-':
			if err := fs.Parse(args); err != nil {
				return nil, err
			}
			rest := fs.Args()
			if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
				return append(pos, rest...), nil
			}
			args = rest
		default:
			pos = append(pos, a)
			args = args[1:]
		}
	}
	return pos, nil
}

// restClient talks to the worker's REST API.
type restClient struct {
	base  *url.URL
	token string
	user  string
	pass  string
	hasPW bool
	hc    *http.Client
}

func newRESTClient(o cliOptions) (*restClient, error) {
	u, err := url.Parse(strings.TrimRight(o.url, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("-url must be http(s)://host:port, got %q", o.url)
	}
	c := &restClient{base: u, token: o.token, hc: &http.Client{}}
	if o.user != "" {
		c.user, c.pass, c.hasPW = strings.Cut(o.user, ":")
	}
	if u.User != nil {
		if c.user == "" {
			c.user = u.User.Username()
			c.pass, c.hasPW = u.User.Password()
		}
		u.User = nil
	}
	return c, nil
}

// apiError is an error answer of the REST API: Kafka Connect's
// {"error_code": …, "message": …}, or whatever else the server sent.
type apiError struct {
	Status  int
	Code    int
	Message string
}

func (e *apiError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
}

// do sends a request and returns the response body of a 2xx answer, or an
// *apiError.
func (c *restClient) do(ctx context.Context, method, path string, query url.Values, body any) ([]byte, int, error) {
	u := c.base.String() + path
	if q := query.Encode(); q != "" {
		u += "?" + q
	}
	var rd io.Reader
	if body != nil {
		var b []byte
		switch v := body.(type) {
		case json.RawMessage:
			b = v
		default:
			var err error
			if b, err = json.Marshal(v); err != nil {
				return nil, 0, err
			}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	} else if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, resp.StatusCode, err
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{Status: resp.StatusCode}
		var eb struct {
			ErrorCode int    `json:"error_code"`
			Message   string `json:"message"`
		}
		if json.Unmarshal(b, &eb) == nil && eb.Message != "" {
			e.Code, e.Message = eb.ErrorCode, eb.Message
		} else {
			e.Message = strings.TrimSpace(string(b))
			if len(e.Message) > 300 {
				e.Message = e.Message[:300] + "…"
			}
		}
		return nil, resp.StatusCode, e
	}
	return b, resp.StatusCode, nil
}

// getJSON decodes a GET answer into out.
func (c *restClient) getJSON(ctx context.Context, path string, query url.Values, out any) ([]byte, error) {
	b, _, err := c.do(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("unexpected answer from GET %s: %w", path, err)
		}
	}
	return b, nil
}

// writeJSON pretty-prints a JSON document (or nothing for an empty body).
func writeJSON(out io.Writer, b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		_, err = out.Write(b)
		return err
	}
	buf.WriteByte('\n')
	_, err := out.Write(buf.Bytes())
	return err
}

// Wire shapes read by the CLI (Kafka Connect's, with txsink's extensions
// under "txsink").
type (
	cliTaskID struct {
		Connector string `json:"connector"`
		Task      int    `json:"task"`
	}
	cliInfo struct {
		Name   string            `json:"name"`
		Config map[string]string `json:"config"`
		Tasks  []cliTaskID       `json:"tasks"`
		Type   string            `json:"type"`
	}
	cliInDoubt struct {
		Topic       string    `json:"topic"`
		Partition   int32     `json:"partition"`
		FirstOffset int64     `json:"first_offset"`
		LastOffset  int64     `json:"last_offset"`
		Since       time.Time `json:"since"`
	}
	cliState struct {
		ID       int    `json:"id"`
		State    string `json:"state"`
		WorkerID string `json:"worker_id"`
		Trace    string `json:"trace"`
		Txsink   *struct {
			TargetState string       `json:"target_state"`
			InDoubt     []cliInDoubt `json:"in_doubt"`
			Partitions  []struct {
				Topic      string `json:"topic"`
				Partition  int32  `json:"partition"`
				NextOffset int64  `json:"next_offset"`
				EndOffset  *int64 `json:"end_offset"`
				Lag        *int64 `json:"lag"`
			} `json:"partitions"`
			Waiting *struct {
				Since time.Time `json:"since"`
				Error string    `json:"error"`
			} `json:"waiting"`
			Restarts    int        `json:"restarts"`
			NextRestart *time.Time `json:"next_restart"`
			LastRound   *struct {
				At      time.Time `json:"at"`
				Outcome string    `json:"outcome"`
				Records int       `json:"records"`
			} `json:"last_round"`
		} `json:"txsink"`
	}
	cliStatus struct {
		Name      string     `json:"name"`
		Connector cliState   `json:"connector"`
		Tasks     []cliState `json:"tasks"`
		Type      string     `json:"type"`
	}
	offsetsBody struct {
		Offsets []struct {
			Partition struct {
				KafkaTopic     string `json:"kafka_topic"`
				KafkaPartition int32  `json:"kafka_partition"`
			} `json:"partition"`
			Offset *struct {
				KafkaOffset int64 `json:"kafka_offset"`
			} `json:"offset"`
		} `json:"offsets"`
	}
)

func newTable(out io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
}

// firstLine shortens a stack trace to its first line for a table cell.
func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return shorten(s)
}

// shorten cuts a line for a table cell, keeping its start and its end
// (where an error chain says why).
func shorten(s string) string {
	const head, tail = 60, 60
	if r := []rune(s); len(r) > head+tail+1 {
		return string(r[:head]) + "…" + string(r[len(r)-tail:])
	}
	return s
}

// printAdvice prints, under the tables, each failed task's (and the
// connector's) cause in full, the setting to fix and what to do.
func printAdvice(out io.Writer, st cliStatus) error {
	type failed struct {
		who   string
		trace string
	}
	var fs []failed
	if st.Connector.Trace != "" {
		fs = append(fs, failed{"Connector " + st.Name, st.Connector.Trace})
	}
	for _, t := range st.Tasks {
		if t.Trace != "" {
			fs = append(fs, failed{fmt.Sprintf("Task %d", t.ID), t.Trace})
		}
		if x := t.Txsink; x != nil && x.Waiting != nil && x.Waiting.Error != "" {
			fs = append(fs, failed{fmt.Sprintf("Task %d waiting since %s", t.ID, x.Waiting.Since.Local().Format(time.TimeOnly)), x.Waiting.Error})
		}
	}
	seen := map[string]bool{}
	for _, f := range fs {
		a := adviseTrace(st.Name, f.trace)
		if a.Cause == "" || seen[a.Cause] {
			continue
		}
		seen[a.Cause] = true
		fmt.Fprintf(out, "\n%s: %s\n", f.who, a.Cause)
		if a.Setting != "" {
			fmt.Fprintf(out, "  setting to fix: %s\n", a.Setting)
		}
		if a.Hint != "" {
			fmt.Fprintf(out, "  next: %s\n", a.Hint)
		}
	}
	if len(fs) > 0 {
		_, err := fmt.Fprintf(out, "  (full trace: txsink connectors status %s -output json)\n", st.Name)
		return err
	}
	return nil
}

func cliList(ctx context.Context, c *restClient, _ string, v *verbFlags, out io.Writer) error {
	q := url.Values{"expand": {"status"}}
	b, err := c.getJSON(ctx, "/connectors", q, nil)
	if err != nil {
		return err
	}
	if v.json {
		return writeJSON(out, b)
	}
	// Connect answers a map name → {"status": …} with expand, a list of
	// names without; accept both.
	statuses := map[string]*cliStatus{}
	var names []string
	var expanded map[string]struct {
		Status *cliStatus `json:"status"`
	}
	if err := json.Unmarshal(b, &expanded); err == nil {
		for n, e := range expanded {
			names = append(names, n)
			statuses[n] = e.Status
		}
	} else if err := json.Unmarshal(b, &names); err != nil {
		return fmt.Errorf("unexpected answer from GET /connectors: %s", firstLine(string(b)))
	}
	sort.Strings(names)
	tw := newTable(out)
	fmt.Fprintln(tw, "NAME\tSTATE\tTASKS\tTYPE")
	for _, n := range names {
		st := statuses[n]
		if st == nil {
			var s cliStatus
			if _, err := c.getJSON(ctx, "/connectors/"+url.PathEscape(n)+"/status", nil, &s); err == nil {
				st = &s
			}
		}
		if st == nil {
			fmt.Fprintf(tw, "%s\t?\t?\t\n", n)
			continue
		}
		running := 0
		for _, t := range st.Tasks {
			if t.State == "RUNNING" {
				running++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d running\t%s\n", n, st.Connector.State, running, len(st.Tasks), st.Type)
	}
	return tw.Flush()
}

func cliGet(ctx context.Context, c *restClient, name string, v *verbFlags, out io.Writer) error {
	var inf cliInfo
	b, err := c.getJSON(ctx, "/connectors/"+url.PathEscape(name), nil, &inf)
	if err != nil {
		return err
	}
	if v.json {
		return writeJSON(out, b)
	}
	tasks := make([]string, len(inf.Tasks))
	for i, t := range inf.Tasks {
		tasks[i] = strconv.Itoa(t.Task)
	}
	fmt.Fprintf(out, "Name:   %s\nType:   %s\nTasks:  %s\n\n", inf.Name, inf.Type, strings.Join(tasks, ", "))
	keys := make([]string, 0, len(inf.Config))
	for k := range inf.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	tw := newTable(out)
	fmt.Fprintln(tw, "SETTING\tVALUE")
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\n", k, inf.Config[k])
	}
	return tw.Flush()
}

// cliShowStatus sends a request that answers a connector status (GET
// …/status, POST …/restart) and prints it.
func cliShowStatus(ctx context.Context, c *restClient, method, path string, v *verbFlags, out io.Writer) error {
	b, _, err := c.do(ctx, method, path, nil, nil)
	if err != nil {
		return err
	}
	return printStatus(b, v, out)
}

func printStatus(b []byte, v *verbFlags, out io.Writer) error {
	if v.json {
		return writeJSON(out, b)
	}
	var st cliStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("unexpected status answer: %w", err)
	}
	tw := newTable(out)
	target := ""
	if x := st.Connector.Txsink; x != nil && x.TargetState != "" {
		target = x.TargetState
	}
	fmt.Fprintln(tw, "CONNECTOR\tSTATE\tTARGET\tWORKER\tTRACE")
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", st.Name, st.Connector.State, target, st.Connector.WorkerID, shorten(adviseTrace(st.Name, st.Connector.Trace).Cause))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Tasks) > 0 {
		fmt.Fprintln(out)
		tw = newTable(out)
		fmt.Fprintln(tw, "TASK\tSTATE\tWORKER\tRESTARTS\tLAST ROUND\tTRACE")
		for _, t := range st.Tasks {
			restarts, round := "", ""
			if x := t.Txsink; x != nil {
				restarts = strconv.Itoa(x.Restarts)
				if r := x.LastRound; r != nil {
					round = fmt.Sprintf("%s, %d records, %s", r.Outcome, r.Records, r.At.Local().Format(time.TimeOnly))
				}
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.State, t.WorkerID, restarts, round, shorten(adviseTrace(st.Name, t.Trace).Cause))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if err := printAdvice(out, st); err != nil {
		return err
	}
	var parts, doubts [][]string
	for _, t := range st.Tasks {
		if t.Txsink == nil {
			continue
		}
		for _, p := range t.Txsink.Partitions {
			end, lag := "?", "?"
			if p.EndOffset != nil {
				end = strconv.FormatInt(*p.EndOffset, 10)
			}
			if p.Lag != nil {
				lag = strconv.FormatInt(*p.Lag, 10)
			}
			parts = append(parts, []string{strconv.Itoa(t.ID), p.Topic, strconv.Itoa(int(p.Partition)), strconv.FormatInt(p.NextOffset, 10), end, lag})
		}
	}
	var inDoubt []cliInDoubt
	if x := st.Connector.Txsink; x != nil {
		inDoubt = append(inDoubt, x.InDoubt...)
	}
	for _, t := range st.Tasks {
		if t.Txsink != nil && (st.Connector.Txsink == nil || len(st.Connector.Txsink.InDoubt) == 0) {
			inDoubt = append(inDoubt, t.Txsink.InDoubt...)
		}
	}
	for _, d := range inDoubt {
		doubts = append(doubts, []string{d.Topic, strconv.Itoa(int(d.Partition)), fmt.Sprintf("%d-%d", d.FirstOffset, d.LastOffset), d.Since.Local().Format(time.DateTime)})
	}
	if len(parts) > 0 {
		fmt.Fprintln(out)
		tw = newTable(out)
		fmt.Fprintln(tw, "TASK\tTOPIC\tPARTITION\tNEXT OFFSET\tEND OFFSET\tLAG")
		for _, r := range parts {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(doubts) > 0 {
		fmt.Fprintln(out)
		tw = newTable(out)
		fmt.Fprintln(tw, "IN DOUBT: TOPIC\tPARTITION\tOFFSETS\tSINCE")
		for _, r := range doubts {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	}
	return nil
}

// readCreateBody reads a connector from a file, standard input or inline
// JSON and returns its name and settings. Both Kafka Connect's create body
// and a flat object of settings are accepted, as "txsink run" does.
func readCreateBody(file, data string) (string, map[string]string, error) {
	var b []byte
	var err error
	src := "-d"
	switch {
	case data != "":
		b = []byte(data)
	case file == "-":
		src = "standard input"
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 16<<20))
	default:
		src = file
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", nil, err
	}
	var wrapped struct {
		Name   string            `json:"name"`
		Config map[string]string `json:"config"`
	}
	cfg := map[string]string{}
	if err := json.Unmarshal(b, &wrapped); err == nil && wrapped.Config != nil {
		cfg = wrapped.Config
	} else if err := json.Unmarshal(b, &cfg); err != nil {
		return "", nil, fmt.Errorf("%s: not a connector (want {\"name\":…,\"config\":{…}} or an object of string settings): %w", src, err)
	}
	name := wrapped.Name
	if name == "" {
		name = cfg["name"]
	}
	if name == "" {
		return "", nil, fmt.Errorf("%s: the connector has no name", src)
	}
	if n := cfg["name"]; n != "" && n != name {
		return "", nil, fmt.Errorf("%s: name %q and config.name %q differ", src, name, n)
	}
	return name, cfg, nil
}

func cliCreate(ctx context.Context, c *restClient, _ string, v *verbFlags, out io.Writer) error {
	name, cfg, err := readCreateBody(v.file, v.data)
	if err != nil {
		return err
	}
	var b []byte
	var status int
	if v.update {
		cfg["name"] = name
		b, status, err = c.do(ctx, http.MethodPut, "/connectors/"+url.PathEscape(name)+"/config", nil, cfg)
	} else {
		b, status, err = c.do(ctx, http.MethodPost, "/connectors", nil, map[string]any{"name": name, "config": cfg})
	}
	if err != nil {
		return err
	}
	if v.json {
		return writeJSON(out, b)
	}
	verb := "Created"
	if v.update && status == http.StatusOK {
		verb = "Updated"
	}
	_, err = fmt.Fprintf(out, "%s connector %s\n", verb, name)
	return err
}

// cliAction returns a verb that sends method to /connectors/NAME+suffix
// and reports done.
func cliAction(method, suffix, done string) func(context.Context, *restClient, string, *verbFlags, io.Writer) error {
	return func(ctx context.Context, c *restClient, name string, v *verbFlags, out io.Writer) error {
		b, _, err := c.do(ctx, method, "/connectors/"+url.PathEscape(name)+suffix, nil, nil)
		if err != nil {
			return err
		}
		if v.json {
			return writeJSON(out, b)
		}
		_, err = fmt.Fprintf(out, "%s connector %s\n", done, name)
		return err
	}
}

func cliRestart(ctx context.Context, c *restClient, name string, v *verbFlags, out io.Writer) error {
	q := url.Values{}
	if v.includeTasks {
		q.Set("includeTasks", "true")
	}
	if v.onlyFailed {
		q.Set("onlyFailed", "true")
	}
	b, _, err := c.do(ctx, http.MethodPost, "/connectors/"+url.PathEscape(name)+"/restart", q, nil)
	if err != nil {
		return err
	}
	// Connect answers 204 for a connector-only restart and 202 with the
	// status when tasks are included.
	if len(bytes.TrimSpace(b)) > 0 {
		return printStatus(b, v, out)
	}
	if v.json {
		return nil
	}
	_, err = fmt.Fprintf(out, "Restarted connector %s\n", name)
	return err
}

// cliNotStopped rewrites Kafka Connect's answer to an offsets change of a
// connector that is not STOPPED, which tells REST clients to PUT
// /connectors/NAME/stop, into the command a CLI user runs.
func cliNotStopped(err error, name string) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(ae.Message, "must be in the STOPPED state") {
		return fmt.Errorf("connector %s must be STOPPED before its offsets can be changed: run txsink connectors stop %s first (HTTP %d)", name, name, ae.Status)
	}
	return err
}

func cliOffsets(ctx context.Context, c *restClient, name string, v *verbFlags, out io.Writer) error {
	path := "/connectors/" + url.PathEscape(name) + "/offsets"
	if v.setFile != "" || v.reset {
		var b []byte
		var err error
		if v.reset {
			b, _, err = c.do(ctx, http.MethodDelete, path, nil, nil)
		} else {
			body, rerr := os.ReadFile(v.setFile)
			if v.setFile == "-" {
				body, rerr = io.ReadAll(io.LimitReader(os.Stdin, 16<<20))
			}
			if rerr != nil {
				return rerr
			}
			var probe offsetsBody
			if err := json.Unmarshal(body, &probe); err != nil || probe.Offsets == nil {
				return fmt.Errorf("%s: want {\"offsets\":[{\"partition\":{\"kafka_topic\":…,\"kafka_partition\":…},\"offset\":{\"kafka_offset\":…}}]}", v.setFile)
			}
			b, _, err = c.do(ctx, http.MethodPatch, path, nil, json.RawMessage(body))
		}
		if err != nil {
			return cliNotStopped(err, name)
		}
		if v.json {
			return writeJSON(out, b)
		}
		var m struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &m) == nil && m.Message != "" {
			_, err = fmt.Fprintln(out, m.Message)
			return err
		}
		_, err = fmt.Fprintf(out, "Offsets of connector %s changed\n", name)
		return err
	}
	var offs offsetsBody
	b, err := c.getJSON(ctx, path, nil, &offs)
	if err != nil {
		return err
	}
	if v.json {
		return writeJSON(out, b)
	}
	tw := newTable(out)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tNEXT OFFSET")
	for _, o := range offs.Offsets {
		off := "-"
		if o.Offset != nil {
			off = strconv.FormatInt(o.Offset.KafkaOffset, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", o.Partition.KafkaTopic, o.Partition.KafkaPartition, off)
	}
	return tw.Flush()
}
